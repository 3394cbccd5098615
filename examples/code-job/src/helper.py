"""A module beside train.py: importing it works because the bundle is unpacked as one folder."""

from __future__ import annotations

import torch


def make_data(n: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """y = 3x - 1 with a little noise: a line a linear layer learns in a few dozen steps."""
    gen = torch.Generator().manual_seed(seed)
    x = torch.rand(n, 1, generator=gen) * 2 - 1
    return x, 3 * x - 1 + 0.01 * torch.randn(n, 1, generator=gen)


GREETING = "hello from helper.py"

"""Evaluation on `val_data` after every epoch: loss, and accuracy for classification.

Every rank evaluates a strided share of the records and the sums are all-reduced. Every rank
runs the same number of batches (the short ones padded with weight-0 samples), so FSDP's
collectives inside the forward pass line up.
"""

from __future__ import annotations

import math

import torch
from torch import nn

from ..data.jsonl import Examples
from . import distributed as D
from .precision import autocast


class Evaluator:
    def __init__(
        self, val: Examples, task: str, batch_size: int, precision: str, rank: int, world: int, device: torch.device
    ) -> None:
        self.val, self.task, self.batch_size, self.precision = val, task, batch_size, precision
        self.rank, self.world, self.device = rank, world, device

    @torch.no_grad()
    def __call__(self, model: nn.Module) -> dict[str, float | None]:
        """Collective: `val_loss` and `val_accuracy` (None for regression) over all of val_data."""
        val, n = self.val, len(self.val.wheres)
        model.eval()
        mine = list(range(self.rank, n, self.world))
        per_rank = math.ceil(n / self.world)
        weights = torch.tensor([1.0] * len(mine) + [0.0] * (per_rank - len(mine)), device=self.device)
        mine += [0] * (per_rank - len(mine))
        loss_sum = correct = 0.0
        for i in range(0, per_rank, self.batch_size):
            idx = torch.tensor(mine[i : i + self.batch_size])
            w = weights[i : i + self.batch_size]
            x, y = val.x[idx].to(self.device), val.y[idx].to(self.device)
            with autocast(self.precision, self.device):
                out = model(x)
            if self.task == "classification":
                losses = nn.functional.cross_entropy(out.float(), y, reduction="none")
                correct += float(((out.argmax(-1) == y).float() * w).sum())
            else:
                losses = nn.functional.mse_loss(out.float().view_as(y), y, reduction="none").view(len(y), -1).mean(1)
            loss_sum += float((losses * w).sum())
        model.train()
        total_loss, total_correct = D.all_reduce_sum([loss_sum, correct], self.device)
        result: dict[str, float | None] = {"val_loss": total_loss / n, "val_accuracy": None}
        if self.task == "classification":
            result["val_accuracy"] = total_correct / n
        return result

"""Evaluation on `val_data` after every epoch: loss, and accuracy for classification.

Every rank evaluates a strided share of the records and the sums are all-reduced. Every rank
runs the same number of batches (the short ones padded with weight-0 samples), so FSDP's
collectives inside the forward pass line up. Streamed from S3 (`data.val` with `mode: stream`), each rank reads
its ~1/N byte share instead (`loader.StreamedVal`), padded to the batches the ranks agreed on.
"""

from __future__ import annotations

import math
from collections.abc import Iterator

import torch
from torch import nn

from ..data.jsonl import Examples
from ..data.loader import StreamedVal
from . import distributed as D
from .precision import autocast


class Evaluator:
    def __init__(
        self, val: Examples | StreamedVal, task: str, batch_size: int, precision: str, rank: int, world: int,
        device: torch.device, pad: tuple[torch.Tensor, torch.Tensor],
    ) -> None:  # fmt: skip
        self.val, self.task, self.batch_size, self.precision = val, task, batch_size, precision
        self.rank, self.world, self.device = rank, world, device
        self.pad = pad  # a sample (x, y): a streamed share's weight-0 padding batches

    def _batches(self) -> Iterator[tuple[torch.Tensor, torch.Tensor, torch.Tensor]]:
        """(x, y, weights) of this rank's share, the same number of batches on every rank."""
        if isinstance(self.val, StreamedVal):
            yield from self.val.batches(self.pad)
            return
        val, n = self.val, len(self.val.wheres)
        mine = list(range(self.rank, n, self.world))
        per_rank = math.ceil(n / self.world)
        weights = torch.tensor([1.0] * len(mine) + [0.0] * (per_rank - len(mine)))
        mine += [0] * (per_rank - len(mine))
        for i in range(0, per_rank, self.batch_size):
            idx = torch.tensor(mine[i : i + self.batch_size])
            yield val.x[idx], val.y[idx], weights[i : i + self.batch_size]

    @torch.no_grad()
    def __call__(self, model: nn.Module) -> dict[str, float | None]:
        """Collective: `val_loss` and `val_accuracy` (None for regression) over all of val_data."""
        n = self.val.records if isinstance(self.val, StreamedVal) else len(self.val.wheres)
        model.eval()
        loss_sum = correct = 0.0
        for x_cpu, y_cpu, w_cpu in self._batches():
            x, y, w = x_cpu.to(self.device), y_cpu.to(self.device), w_cpu.to(self.device)
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

"""The train metrics and where they go: a window of steps summarised every `log_every` steps,
written to `metrics.jsonl` and TensorBoard (rank 0), a progress bar on a terminal, and plain
rank-prefixed log lines otherwise."""

from __future__ import annotations

import json
import resource
import sys
import time
from collections.abc import Callable
from pathlib import Path
from types import TracebackType
from typing import Any

import torch

from ..log import log
from . import distributed as D
from .steps import StepDone


def peak_memory_mb(device: torch.device) -> float:
    if device.type == "cuda":
        return torch.cuda.max_memory_allocated(device) / 2**20
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux: KiB


class MetricsSink:
    """Rank 0 writes; other ranks hold a sink that does nothing, so the loop needs no `if rank`."""

    def __init__(
        self, output_dir: Path, rank: int, total_steps: int, also: Callable[[dict[str, Any]], None] | None = None
    ) -> None:
        """`also`: called with each record as well (the experiment trackers, tracking.py)."""
        self.enabled = rank == 0
        self.rank = rank
        self.also = also
        self._file = None
        self._tb: Any = None
        self._bar: Any = None
        if not self.enabled:
            return
        output_dir.mkdir(parents=True, exist_ok=True)
        self._file = open(output_dir / "metrics.jsonl", "a", buffering=1)  # noqa: SIM115
        try:
            from torch.utils.tensorboard import SummaryWriter

            self._tb = SummaryWriter(str(output_dir / "tensorboard"))
        except ImportError:
            log(rank, "tensorboard is not installed: no TensorBoard events")
        if sys.stderr.isatty():
            from tqdm import tqdm

            self._bar = tqdm(total=total_steps, desc="train", unit="step", dynamic_ncols=True)

    def write(self, record: dict[str, Any]) -> None:
        if not self.enabled or self._file is None:
            return
        record = {"time": round(time.time(), 3), **record}
        self._file.write(json.dumps(record) + "\n")
        if self.also is not None:
            self.also(record)
        if self._tb is not None:
            step = int(record.get("step", 0))
            for key, value in record.items():
                if key not in ("time", "step", "epoch", "kind") and isinstance(value, int | float):
                    self._tb.add_scalar(f"{record.get('kind', 'train')}/{key}", value, step)

    def progress(self, step: int, text: str) -> None:
        """Advance the bar on a terminal; otherwise print a plain line."""
        if not self.enabled:
            return
        if self._bar is not None:
            self._bar.n = step
            self._bar.set_postfix_str(text, refresh=True)
        else:
            log(self.rank, text)

    def __enter__(self) -> MetricsSink:
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        self.close()

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()
        if self._tb is not None:
            self._tb.close()
        if self._file is not None:
            self._file.close()


class MetricsWindow:
    """The steps since the last train line (a `StepListener`): one line every `log_every` steps and
    at the last, with the loss averaged over the window's steps and every rank. Its clock restarts
    when a line is taken, so the time spent logging counts in the next window's step time."""

    def __init__(self, every: int, total: int, global_batch: int, world: int, device: torch.device) -> None:
        self.every, self.total, self.global_batch, self.world, self.device = every, total, global_batch, world, device
        self.loss: torch.Tensor | float = 0.0
        self.steps, self.data_wait, self.start = 0, 0.0, time.perf_counter()

    def on_step(self, done: StepDone, /) -> None:
        self.loss = self.loss + done.loss  # on the device: no wait for the GPU
        self.steps += 1
        self.data_wait += done.timing.data_wait_s

    def due(self, step: int) -> bool:
        return step % self.every == 0 or step == self.total

    def take(self, step: int, epoch: int, lr: float) -> dict[str, Any]:
        """Collective (the loss all-reduce): the train record of the window, which then starts over. Reading
        the loss waits for the window's kernels, so the window's time is taken after it."""
        loss = D.all_reduce_sum([float(self.loss) / self.steps], self.device)[0] / self.world
        now = time.perf_counter()
        elapsed = now - self.start
        record = {
            "kind": "train", "step": step, "epoch": epoch, "loss": loss, "lr": lr,
            "samples_per_s": self.steps * self.global_batch / elapsed,
            "step_time_s": elapsed / self.steps, "data_wait_s": self.data_wait / self.steps,
            "world_size": self.world, "peak_mem_mb": peak_memory_mb(self.device),
        }  # fmt: skip
        self.loss, self.steps, self.data_wait, self.start = 0.0, 0, 0.0, now
        return record

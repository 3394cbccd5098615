"""Where progress goes: `metrics.jsonl` and TensorBoard (rank 0), a progress bar on a terminal,
and plain rank-prefixed log lines otherwise."""

from __future__ import annotations

import json
import resource
import sys
import time
from pathlib import Path
from typing import Any

import torch

from .log import log


def peak_memory_mb(device: torch.device) -> float:
    if device.type == "cuda":
        return torch.cuda.max_memory_allocated(device) / 2**20
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux: KiB


class MetricsSink:
    """Rank 0 writes; other ranks hold a sink that does nothing, so the loop needs no `if rank`."""

    def __init__(self, output_dir: Path, rank: int, total_steps: int) -> None:
        self.enabled = rank == 0
        self.rank = rank
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

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()
        if self._tb is not None:
            self._tb.close()
        if self._file is not None:
            self._file.close()

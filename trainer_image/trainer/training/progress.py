"""How far the run has got, told where every target can read it back (a `StepListener`, rank 0).

After each step the reporter updates step/total, epoch, the step's loss, samples/s and the ETA, and
- writes `progress.json` into the output folder (atomically, at most once a second and at the last
  step): the local target reads the run folder, SLURM the job's folder, SageMaker local mode the host's;
- prints one line `trainctl progress: step=12/40 epoch=0 loss=0.4100 samples_per_s=850.0 eta_s=3.1`
  every `log_every` steps and at the last: SLURM's job output, a PyTorchJob's pod log, and SageMaker's
  `MetricDefinitions` regexes read it (docs/contracts.md "Progress" is the protocol; a `command:` job may
  print the same line or write the same file);
- on Kubernetes with Kubeflow Trainer's `TrainJobStatus` gate on, posts `trainerStatus` to the controller's
  status server (kubeflow_status.py), which fills `TrainJob.status.trainerStatus`.

samples/s and the ETA come from the wall time of the last steps (an exponential mean over about 20 steps),
so a slow first step (compilation, data warm-up) fades out. The loss is the train line's, one definition
everywhere: the mean over ranks and over the last `log_every` steps, as in metrics.jsonl, `trainctl metrics`
and the summary's `final_loss` (rank 0's loss of one step, shown once, read as a different number).
"""

from __future__ import annotations

import json
import math
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ..log import log
from .steps import StepDone

LINE_MARK = "trainctl progress:"
FILE_NAME = "progress.json"
SMOOTHING = 0.1  # weight of the newest step in the mean step time (about the last 20 steps)


def progress_line(fields: dict[str, Any]) -> str:
    """The one-line protocol: the mark, then `key=value` words (step as `N/TOTAL`, booleans true/false)."""
    words = [f"step={fields['step']}/{fields['total_steps']}"]
    for key, fmt in (("epoch", "{}"), ("loss", "{:.6g}"), ("samples_per_s", "{:.1f}"), ("eta_s", "{:.1f}")):
        value = fields.get(key)
        if value is not None:
            words.append(f"{key}={fmt.format(value)}")
    if isinstance(fields.get("deterministic"), bool):
        words.append(f"deterministic={str(fields['deterministic']).lower()}")
    return f"{LINE_MARK} {' '.join(words)}"


class ProgressReporter:
    """Rank 0 reports; other ranks hold a reporter that does nothing, so the loop needs no `if rank`."""

    def __init__(
        self,
        output_dir: Path,
        rank: int,
        total: int,
        global_batch: int,
        every: int,
        post: Callable[[dict[str, Any]], None] | None = None,
        modes: dict[str, bool] | None = None,
    ) -> None:
        self.enabled = rank == 0
        self.rank, self.path, self.total, self.global_batch, self.every = (
            rank,
            output_dir / FILE_NAME,
            total,
            global_batch,
            every,
        )
        self.post = post
        self.modes = dict(modes or {})  # how the run trains (`deterministic`), in every report: status shows it
        self.step_s: float | None = None
        self.written = 0.0
        self.loss: float | None = None
        self.newest: StepDone | None = None  # the newest step not yet in the file

    def on_step(self, done: StepDone, loss: float | None) -> None:
        """After the step's train line, if any: `loss` is the newest line's (None before the first)."""
        if not self.enabled:
            return
        self.loss = loss if loss is not None and math.isfinite(loss) else None
        wall = done.timing.wall_s
        self.step_s = wall if self.step_s is None else (1 - SMOOTHING) * self.step_s + SMOOTHING * wall
        last = done.step >= self.total
        now = time.monotonic()
        due_file, due_line = last or now - self.written >= 1.0, last or done.step % self.every == 0
        self.newest = None if due_file else done
        if not (due_file or due_line):
            return
        fields = self.fields(done)
        if due_file:
            self.written = now
            self.write(fields)
            if self.post is not None:
                self.post(fields)
        if due_line:
            log(self.rank, progress_line(fields))

    def close(self) -> None:
        """The file catches up with the newest step when training stops for any reason: a stop's checkpoint
        is at that step, and status must not show the step of up to a second before (issue 37)."""
        if self.enabled and self.newest is not None:
            self.write(self.fields(self.newest))
            self.newest = None

    def fields(self, done: StepDone) -> dict[str, Any]:
        step_s = self.step_s or 0.0
        rate = self.global_batch / step_s if step_s > 0 else None
        return {
            "step": done.step, "total_steps": self.total, "epoch": done.epoch, "loss": self.loss,
            "samples_per_s": rate, "eta_s": max(0, self.total - done.step) * step_s,
            "updated_at": round(time.time(), 3), **self.modes,
        }  # fmt: skip

    def write(self, fields: dict[str, Any]) -> None:
        """progress.json, replaced whole so a reader never sees half of it; a full disk never stops training."""
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            tmp = self.path.with_name(f"{FILE_NAME}.{os.getpid()}.tmp")
            tmp.write_text(json.dumps(fields) + "\n")
            os.replace(tmp, self.path)
        except OSError:
            pass

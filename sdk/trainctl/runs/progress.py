"""A run's progress, read from what the trainer (or a `command:` program) reported, and said in one line.

The protocol (docs/contracts.md "Progress"; the trainer's side is trainer/training/progress.py): a JSON file
`progress.json` in the run's output folder, replaced whole, with `step`, `total_steps`, `epoch`, `loss`,
`samples_per_s`, `eta_s`, `updated_at`, `deterministic`; and/or a log line
`trainctl progress: step=1200/5000 epoch=1 loss=0.41 samples_per_s=1850 eta_s=840 deterministic=false` (anything may come
before the mark: a rank prefix, a timestamp). Every field but the step is optional. Each target reads
whichever it can reach (the folder, the job's output, the pod log, SageMaker's metrics) and hands the
text here; the one read here is a log file's tail on this machine (`tail_lines`).
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .state import Progress

LINE_MARK = "trainctl progress:"
FILE_NAME = "progress.json"
TAIL_BYTES = 64 * 1024  # how much of a log's end is read for its last progress line
_WORD = re.compile(r"(\w+)=(\S+)")
# SageMaker MetricDefinitions (targets/sagemaker/request.py): the metric name -> its regex's capture group
METRIC_PATTERNS: dict[str, str] = {
    "train:step": rf"{LINE_MARK} step=([0-9]+)/",
    "train:total_steps": rf"{LINE_MARK} step=[0-9]+/([0-9]+)",
    "train:epoch": rf"{LINE_MARK} .*epoch=([0-9]+)",
    "train:loss": rf"{LINE_MARK} .*loss=([-+0-9.eE]+)",
    "train:samples_per_s": rf"{LINE_MARK} .*samples_per_s=([-+0-9.eE]+)",
    "train:eta_s": rf"{LINE_MARK} .*eta_s=([-+0-9.eE]+)",
    "validation:loss": r'"val_loss": ([-+0-9.eE]+)',
    "validation:accuracy": r'"val_accuracy": ([-+0-9.eE]+)',
}
_FIELD_OF_METRIC = {name.split(":", 1)[1]: name for name in METRIC_PATTERNS if name.startswith("train:")}


def _number(text: Any) -> float | None:
    try:
        value = float(text)
    except (TypeError, ValueError):
        return None
    return value if math.isfinite(value) else None


def from_fields(fields: dict[str, Any], updated_at: float | None = None) -> Progress | None:
    """A `Progress` from the file's (or the metrics') fields; None without a step."""
    from .state import Progress  # here: a SageMaker render reads METRIC_PATTERNS and loads no run records

    step = _number(fields.get("step"))
    if step is None:
        return None
    whole = {key: int(v) for key in ("total_steps", "epoch") if (v := _number(fields.get(key))) is not None}
    real = {key: v for key in ("loss", "samples_per_s", "eta_s") if (v := _number(fields.get(key))) is not None}
    when = _number(fields.get("updated_at")) or updated_at
    flag = fields.get("deterministic")
    det = flag if isinstance(flag, bool) else {"true": True, "false": False}.get(str(flag))
    return Progress(step=int(step), **whole, **real, updated_at=when, deterministic=det)


def from_json(text: str | bytes) -> Progress | None:
    """progress.json's text; None when it is not (yet) a progress record."""
    try:
        found = json.loads(text)
    except ValueError:
        return None
    return from_fields(found) if isinstance(found, dict) else None


def from_line(line: str, updated_at: float | None = None) -> Progress | None:
    """One log line in the protocol's shape, wherever the mark is in it; None for any other line."""
    at = line.find(LINE_MARK)
    if at < 0:
        return None
    fields: dict[str, Any] = dict(_WORD.findall(line[at + len(LINE_MARK) :]))
    step, _, total = str(fields.pop("step", "")).partition("/")
    return from_fields({**fields, "step": step, "total_steps": total or None}, updated_at)


def tail_lines(path: Path) -> list[str]:
    """The lines in the last `TAIL_BYTES` of a log file on this machine (none if it cannot be read)."""
    try:
        with open(path, "rb") as f:
            f.seek(max(0, f.seek(0, 2) - TAIL_BYTES))
            return f.read().decode(errors="replace").splitlines()
    except OSError:
        return []


def last_in(lines: Iterable[str]) -> Progress | None:
    """The last progress line among log lines (a SLURM output file's tail, a pod's log)."""
    found = None
    for line in lines:
        found = from_line(line) or found
    return found


def from_metrics(values: dict[str, float], updated_at: float | None = None) -> Progress | None:
    """From SageMaker's metric names (`train:step`...) as DescribeTrainingJob's FinalMetricDataList has them."""
    return from_fields({field: values.get(metric) for field, metric in _FIELD_OF_METRIC.items()}, updated_at)


def mode_line(progress: Progress) -> str:
    """`trainctl status`'s words for the run's deterministic mode ("" when the trainer did not say)."""
    if progress.deterministic is None:
        return ""
    if progress.deterministic:
        return "on: a resume is bit-identical to an uninterrupted run"
    return "off: faster kernels; a resume restores every state, not the float order of every kernel"


def _grouped(number: float) -> str:
    return f"{round(number):,}"


def _duration(seconds: float) -> str:
    if seconds < 90:
        return f"{round(seconds)} s"
    if seconds < 90 * 60:
        return f"{round(seconds / 60)} min"
    hours, minutes = divmod(round(seconds / 60), 60)
    return f"{hours} h {minutes:02d} min"


def describe(progress: Progress, finished: bool = False) -> str:
    """`step 1,200/5,000 (24 %) · epoch 1 · loss 0.41 · 1,850 samples/s · ETA 14 min` (what is known of it; no ETA
    once the run has ended, cancelled or failed short of its last step)."""
    if progress.step is None:
        return ""
    step = f"step {_grouped(progress.step)}"
    if progress.total_steps:
        percent = 100 * progress.step / progress.total_steps
        step += f"/{_grouped(progress.total_steps)} ({percent:.0f} %)"
    parts = [step]
    if progress.epoch is not None:
        parts.append(f"epoch {progress.epoch}")
    if progress.loss is not None:
        parts.append(f"loss {progress.loss:.3g}")
    if progress.samples_per_s is not None:
        parts.append(f"{_grouped(progress.samples_per_s)} samples/s")
    if not finished and progress.eta_s is not None and progress.total_steps and progress.step < progress.total_steps:
        parts.append(f"ETA {_duration(progress.eta_s)}")
    return " · ".join(parts)


def short(progress: Progress | None) -> str:
    """The `trainctl list` column: `1,200/5,000 (24 %)`, `-` when nothing was read."""
    if progress is None or progress.step is None:
        return "-"
    if not progress.total_steps:
        return _grouped(progress.step)
    return f"{_grouped(progress.step)}/{_grouped(progress.total_steps)} ({100 * progress.step / progress.total_steps:.0f} %)"

"""The metric a trial reached, read from the trainer's own `metrics.jsonl` in the run's output folder.

One small reader, so the progress work (issue 25) can replace it: every record of the file that carries
the metric (a `train` line every log_every steps, an `eval` line per epoch) is a point (step, value).
Where the folder is not readable from here (a pod's volume, S3) the points are empty and the trial's
final value comes from the trainer's summary.json, which each target's `summary` reads.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

Point = tuple[int, float]


def points(output_dir: str | None, metric: str) -> list[Point]:
    """(step, value) of every record with `metric`, in file order; [] when there is no readable file."""
    if not output_dir or "://" in output_dir:
        return []
    path = Path(output_dir) / "metrics.jsonl"
    try:
        text = path.read_text()
    except OSError:
        return []
    found: list[Point] = []
    for line in text.splitlines():
        try:
            record: Any = json.loads(line)
        except ValueError:  # the line the trainer is writing now
            continue
        value = record.get(metric) if isinstance(record, dict) else None
        step = record.get("step") if isinstance(record, dict) else None
        if isinstance(value, (int, float)) and isinstance(step, int) and math.isfinite(value):
            found.append((step, float(value)))
    return found


def best(found: list[Point], mode: str, up_to: int | None = None) -> float | None:
    """The best value at or before step `up_to` (all of them when None)."""
    values = [v for s, v in found if up_to is None or s <= up_to]
    if not values:
        return None
    return max(values) if mode == "max" else min(values)


def final(found: list[Point], summary: dict[str, Any] | None, metric: str) -> float | None:
    """A trial's result: the summary's value when it finished, else the last value it reported."""
    value = (summary or {}).get(metric)
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    return found[-1][1] if found else None

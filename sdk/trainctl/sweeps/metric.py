"""The metric a trial reached, read the one way trainctl reads a run's metrics: `Run.metrics` (runs/curves.py rows:
the trainer's metrics.jsonl where the target can read the run's output folder, else the run's log, whose
progress lines progress.py reads and whose `epoch N: {...}` lines carry the validation values). Every row
that carries the metric (a `train` row every log_every steps, an `eval` row per epoch) is a point (step, value).
A finished trial's value comes from the trainer's summary.json where the target can read it.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Sequence
from typing import Any

from ..errors import TrainctlError
from ..run import Run
from ..targets.lookup import get_target

Point = tuple[int, float]


def points(run: Run, metric: str) -> list[Point]:
    """(step, value) of every row with `metric`, in order; [] when the run has nothing readable yet."""
    rows: list[dict[str, Any]] = []
    with contextlib.suppress(TrainctlError, OSError):
        rows = run.metrics(lineage=False)
    return _points(rows, metric)


def points_many(runs: Sequence[Run], metric: str) -> dict[str, list[Point]]:
    """`points` of each run, read together (`Target.metrics_many`: SLURM reads every run's file in one call to
    the cluster, not one each); the runs share a target, as a sweep's trials do."""
    if not runs:
        return {}
    rows = get_target(runs[0].target).metrics_many(runs)
    return {run.id: _points(rows.get(run.id, []), metric) for run in runs}


def _points(rows: list[dict[str, Any]], metric: str) -> list[Point]:
    found: list[Point] = []
    for row in rows:
        value, step = row.get(metric), row.get("step")
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not isinstance(step, int):
            continue
        if math.isfinite(value):
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


def at(found: list[Point], step: int) -> float | None:
    """The value at `step`, or the newest before it (None when the first point is later)."""
    before = [v for s, v in found if s <= step]
    return before[-1] if before else None

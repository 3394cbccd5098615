"""Best first: the order of `sweep status`, `Sweep.rows` and `Sweep.wait`.

Finished trials rank by their result. While a trial still runs and the trials are at different steps, each
ranks by its value at the newest step all of them have reached, so one trial's step-23 accuracy is never set
against another's at step 46 (`median.py` compares at one step for the same reason).
"""

from __future__ import annotations

from ..runs.state import RunState
from .metric import Point, at
from .store import TrialRow

STOPPED_EARLY = "stopped early"
ENDED = frozenset({*(s.value for s in RunState if s.finished), STOPPED_EARLY, "not submitted"})


def at_one_step(rows: list[TrialRow], curves: dict[int, list[Point]]) -> list[TrialRow]:
    """`rows` with `compared`/`compared_at` set when a trial runs and the trials are at different steps."""
    steps = {r.step for r in rows if r.step is not None}
    running = any(r.state not in ENDED for r in rows if r.step is not None)
    if len(steps) < 2 or not running:
        return rows
    common = min(steps)
    return [
        r.model_copy(update={"compared": at(curves.get(r.index, []), common), "compared_at": common})
        if r.step is not None
        else r
        for r in rows
    ]


def best_first(rows: list[TrialRow], mode: str, curves: dict[int, list[Point]] | None = None) -> list[TrialRow]:
    """The trials best first by `mode` ("max"/"min"), then those without a value yet, by index."""
    ranked = at_one_step(rows, curves) if curves is not None else rows
    sign = -1.0 if mode == "max" else 1.0

    def value(row: TrialRow) -> float | None:
        return row.compared if row.compared_at is not None else row.metric

    return sorted(ranked, key=lambda r: (value(r) is None, sign * (value(r) or 0.0), r.index))

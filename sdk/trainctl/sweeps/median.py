"""The median stopping rule (Golovin et al., "Google Vizier", KDD 2017, section 3.2.2), as data in, data out.

A running trial is judged at S, the latest step it reported (S >= after_step) that at least `min_trials`
other trials (running or finished) have also reached; it is stopped when its best metric up to S is worse
than the median of those trials' best values up to S. Comparing at the same step keeps a trial that
started late from being judged against trials that trained longer, and one that runs ahead of the others
is judged at an earlier step they share.
"""

from __future__ import annotations

import statistics

from ..spec.sweep import EarlyStopping
from .metric import Point, best


def to_stop(
    found: dict[int, list[Point]], running: set[int], rule: EarlyStopping, metric: str, mode: str
) -> dict[int, str]:
    """{trial index: why} for each running trial the rule stops now."""
    stop: dict[int, str] = {}
    for index in sorted(running):
        mine = found.get(index) or []
        reached = {other: max(s for s, _ in pts) for other, pts in found.items() if other != index and pts}
        shared = [
            s for s, _ in mine if s >= rule.after_step and sum(r >= s for r in reached.values()) >= rule.min_trials
        ]
        if not shared:
            continue
        step = max(shared)
        own = best(mine, mode, step)
        others = [v for o, r in reached.items() if r >= step if (v := best(found[o], mode, step)) is not None]
        if own is None or len(others) < rule.min_trials:
            continue
        median = statistics.median(others)
        if (own < median) if mode == "max" else (own > median):
            stop[index] = (
                f"{metric} {own:.4g} by step {step} trails the median {median:.4g} of {len(others)} other "
                f"trial(s) at that step (median rule after step {rule.after_step}, mode {mode})"
            )
    return stop

"""Drift told from noise: every figure beside the previous run's median and min-max band.

On 2 shared cores a figure's spread between repetitions is large (docs/benchmarks.md), so a new median
is only called a move when it falls outside the band (min to max) the previous run measured for the same
figure; inside that band it is within the noise that run already showed. A band from one repetition is no
band: such a figure is not judged. Runs are compared only with runs of the same kind (quick or full).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

INSIDE, UP, DOWN, NO_BAND = "inside", "up", "down", "no band"


def load_previous(path: Path, quick: bool) -> dict[str, Any] | None:
    """The results file a run is about to replace, if it is one of the same kind (quick or full)."""
    try:
        previous = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(previous, dict) or not isinstance(previous.get("figures"), list):
        return None
    return previous if bool(previous.get("meta", {}).get("quick")) == quick else None


def verdict(median: float, old: dict[str, Any]) -> str:
    """`up`/`down` when `median` is outside the previous run's min-max band, `inside` when within it."""
    if (old.get("reps") or 0) < 2 or old.get("min") is None or old.get("max") is None:
        return NO_BAND
    return UP if median > old["max"] else DOWN if median < old["min"] else INSIDE


def compare(figures: list[dict[str, Any]], previous: dict[str, Any] | None) -> None:
    """Give every figure `previous` (that run's median, band, reps and when) and `drift` (verdict), or None."""
    meta = (previous or {}).get("meta", {})
    before = {(f["benchmark"], f["name"]): f for f in (previous or {}).get("figures", [])}
    for fig in figures:
        old = before.get((fig["benchmark"], fig["name"]))
        if old is None or old.get("median") is None or fig["median"] is None:
            fig["previous"], fig["drift"] = None, None
            continue
        fig["previous"] = {key: old.get(key) for key in ("median", "min", "max", "reps")}
        fig["previous"].update(started_utc=meta.get("started_utc"), git_commit=meta.get("git_commit"))
        fig["drift"] = verdict(fig["median"], old)


def carry_over(results: dict[str, Any], previous: dict[str, Any] | None) -> None:
    """A run of some benchmarks (`--only`) keeps the previous file's figures of the others, so the file always
    holds the last measured figure of every benchmark (each with its own `previous`)."""
    if previous is None:
        return
    ran = set(results["benchmarks"])
    kept = {name: info for name, info in previous.get("benchmarks", {}).items() if name not in ran}
    if not kept:
        return
    results["figures"] += [
        {"previous": None, "drift": None, **f} for f in previous["figures"] if f["benchmark"] in kept
    ]
    results["benchmarks"].update({name: {**info, "carried_over": True} for name, info in kept.items()})
    results["meta"]["carried_over_from"] = {
        key: previous.get("meta", {}).get(key) for key in ("started_utc", "git_commit")
    }


def keep_records(results: dict[str, Any], previous: dict[str, Any] | None) -> None:
    """Keep what the previous file recorded beside its run (e.g. `issue12_layout_check`, which the docs cite)."""
    for key, value in (previous or {}).items():
        results.setdefault(key, value)


def summary(figures: list[dict[str, Any]]) -> str:
    """One paragraph: how many figures stayed inside the previous run's band, and which moved."""
    judged = [f for f in figures if f.get("drift") in (INSIDE, UP, DOWN)]
    if not judged:
        return "No figure of this run has a previous run's band to be compared with."
    moved = [f for f in judged if f["drift"] != INSIDE]
    head = f"Against the previous run: {len(judged) - len(moved)} of {len(judged)} figures inside its min-max band"
    if not moved:
        return head + ", none moved."
    names = "; ".join(f"{f['benchmark']} / {f['name']} ({f['drift']})" for f in moved)
    return f"{head}; moved beyond it: {names}."

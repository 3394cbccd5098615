"""Drift told from noise (bench/drift.py): a figure is marked when its median leaves the previous run's band."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from bench.common import Figure  # noqa: E402
from bench.drift import carry_over, compare, keep_records, load_previous, summary, verdict  # noqa: E402
from bench.report import markdown_table  # noqa: E402


def fig(name: str, median: float | None, lo: float | None = None, hi: float | None = None, reps: int = 5,
        benchmark: str = "b") -> dict[str, Any]:  # fmt: skip
    return Figure(benchmark, name, median, lo, hi, unit="x", reps=reps).to_json()


def run(quick: bool, *figures: dict[str, Any], benchmarks: tuple[str, ...] = ("b",)) -> dict[str, Any]:
    meta = {"started_utc": "2026-11-21T14:02:14Z", "duration_s": 1.0, "cpus": 2, "python": "3.11", "torch": "x",
            "git_commit": "abc", "load_avg_1min_start": 1.0, "load_avg_1min_end": 1.0, "quick": quick}  # fmt: skip
    return {"meta": meta, "benchmarks": {b: {"status": "ok", "error": None, "seconds": 1.0} for b in benchmarks},
            "figures": list(figures)}  # fmt: skip


@pytest.mark.parametrize(
    ("median", "reps", "expected"),
    [(1.0, 5, "inside"), (0.9, 5, "inside"), (1.2, 5, "inside"), (1.21, 5, "up"), (0.89, 5, "down"), (5, 1, "no band")],
)
def test_verdict_is_against_the_previous_band(median: float, reps: int, expected: str) -> None:
    assert verdict(median, {"median": 1.0, "min": 0.9, "max": 1.2, "reps": reps}) == expected


def test_each_figure_gets_the_previous_run_and_the_report_marks_what_moved() -> None:
    before = run(False, fig("steady", 1.0, 0.8, 1.3), fig("slower", 1.0, 0.9, 1.1), fig("gone", 2.0, 1.0, 3.0))
    now = run(False, fig("steady", 1.2, 1.0, 1.4), fig("slower", 1.5, 1.4, 1.6), fig("new", 3.0, 2.0, 4.0))
    compare(now["figures"], before)
    by_name = {f["name"]: f for f in now["figures"]}
    assert by_name["steady"]["drift"] == "inside" and by_name["slower"]["drift"] == "up"
    assert by_name["new"]["previous"] is None and by_name["new"]["drift"] is None
    assert by_name["slower"]["previous"] == {"median": 1.0, "min": 0.9, "max": 1.1, "reps": 5,
                                             "started_utc": "2026-11-21T14:02:14Z", "git_commit": "abc"}  # fmt: skip
    table = markdown_table(now)
    assert "| 1 (0.9-1.1) up | **moved up** beyond the previous run's band |" in table
    assert "| 1 (0.8-1.3) |  |" in table and "| - |" in table
    assert "1 of 2 figures inside its min-max band; moved beyond it: b / slower (up)." in table


def test_a_partial_run_keeps_the_other_benchmarks_figures(tmp_path: Path) -> None:
    before = run(False, fig("t", 1.0, 0.9, 1.1), fig("s", 2.0, 1.0, 3.0, benchmark="scale"), benchmarks=("b", "scale"))
    path = tmp_path / "results.json"
    path.write_text(json.dumps(before))
    assert load_previous(path, quick=True) is None  # a quick run is never compared with a full one
    previous = load_previous(path, quick=False)
    now = run(False, fig("s", 2.5, 2.0, 3.0, benchmark="scale"), benchmarks=("scale",))
    compare(now["figures"], previous)
    carry_over(now, previous)
    assert [(f["benchmark"], f["name"]) for f in now["figures"]] == [("scale", "s"), ("b", "t")]
    assert now["benchmarks"]["b"]["carried_over"] is True and "carried_over" not in now["benchmarks"]["scale"]
    assert now["meta"]["carried_over_from"] == {"started_utc": "2026-11-21T14:02:14Z", "git_commit": "abc"}
    assert summary(now["figures"]) == "Against the previous run: 1 of 1 figures inside its min-max band, none moved."
    keep_records(now, {**before, "issue12_layout_check": {"kept": True}})
    assert now["issue12_layout_check"] == {"kept": True} and now["meta"]["carried_over_from"]  # this run's own meta

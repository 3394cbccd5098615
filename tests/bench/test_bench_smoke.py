"""The benchmark harness runs and writes well-formed results (no timing is asserted: benchmarks
report, tests do not judge speed on a shared machine)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from bench.common import Figure  # noqa: E402
from bench.report import BEGIN, END, update_docs  # noqa: E402

FIGURE_KEYS = {"benchmark", "name", "median", "min", "max", "unit", "target", "reps", "note", "detail", "meets"}
FIGURE_KEYS |= {"previous", "drift"}  # bench/drift.py


def test_quick_render_run_writes_wellformed_results(tmp_path: Path) -> None:
    out = tmp_path / "results.json"
    proc = subprocess.run(
        [sys.executable, "-m", "bench", "--quick", "--only", "render", "--out", str(out)],
        cwd=ROOT, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    results = json.loads(out.read_text())
    assert set(results) == {"meta", "benchmarks", "figures"}
    meta = results["meta"]
    assert meta["quick"] is True and meta["cpus"] >= 1
    assert isinstance(meta["load_avg_1min_start"], float) and isinstance(meta["load_avg_1min_end"], float)
    assert list(results["benchmarks"]) == ["render"]
    assert results["benchmarks"]["render"]["status"] == "ok" and results["benchmarks"]["render"]["error"] is None
    figures = results["figures"]
    assert figures, "the render benchmark reported no figure"
    for fig in figures:
        assert set(fig) == FIGURE_KEYS
        if fig["median"] is None:
            assert fig["note"].startswith("not available: ")
            continue
        assert 0 < fig["min"] <= fig["median"] <= fig["max"]
        assert fig["reps"] >= 1
    names = [f["name"] for f in figures]
    assert any(n.startswith("render 100 distinct jobs") for n in names), names
    assert "| benchmark | figure | median |" in proc.stdout


def test_unknown_benchmark_is_refused(tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "bench", "--only", "nope", "--out", str(tmp_path / "r.json")],
        cwd=ROOT, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert proc.returncode == 2 and "unknown benchmark" in proc.stderr
    assert not (tmp_path / "r.json").exists()


@pytest.mark.parametrize(
    ("target", "median", "meets"),
    [("<= 1.03", 1.03, True), ("<= 1.03", 1.04, False), (">= 3", 2.9, False), ("< 2", 1.99, True), (None, 5.0, None)],
)
def test_figure_judges_its_target(target: str | None, median: float, meets: bool | None) -> None:
    assert Figure("b", "n", median, median, median, target=target, reps=1).meets is meets
    assert Figure("b", "n", None, target=target).meets is None


def test_docs_table_is_replaced_between_markers(tmp_path: Path) -> None:
    doc = tmp_path / "benchmarks.md"
    doc.write_text(f"# Benchmarks\n\nintro\n\n{BEGIN}\nold table\n{END}\n\n## Analysis\nkept\n")
    results = {
        "meta": {"started_utc": "t", "duration_s": 1.0, "cpus": 2, "python": "3.11", "torch": "x", "git_commit": "c",
                 "load_avg_1min_start": 1.0, "load_avg_1min_end": 2.0, "quick": False},
        "benchmarks": {"x": {"status": "ok", "error": None, "seconds": 1.0}},
        "figures": [Figure("x", "ratio", 1.5, 1.0, 2.0, unit="x", target="<= 1.03", reps=3).to_json()],
    }  # fmt: skip
    update_docs(doc, results)
    text = doc.read_text()
    assert "old table" not in text and "intro" in text and "## Analysis\nkept" in text
    assert "| x | ratio | 1.5 | 1 | 2 | x | &lt;= 1.03 | 3 | - | **misses the target** (see below) |" in text

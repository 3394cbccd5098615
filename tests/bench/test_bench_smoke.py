"""Every benchmark runs (in `--quick` mode) and writes well-formed results (no timing is asserted: benchmarks
report, tests do not judge speed on a shared machine)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import torch

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from bench.common import Figure  # noqa: E402
from bench.report import BEGIN, END, update_docs  # noqa: E402

FIGURE_KEYS = {"benchmark", "name", "median", "min", "max", "unit", "target", "reps", "note", "detail", "meets"}
FIGURE_KEYS |= {"previous", "drift"}  # bench/drift.py
CUDA_WHY = None if torch.cuda.is_available() else f"no CUDA device (torch {torch.__version__}); bench --gpu needs one"


def start_bench(out: Path, *args: str) -> subprocess.Popen[str]:
    """`python -m bench --quick ARGS` into a fresh results file `out` (so no previous run is compared)."""
    return subprocess.Popen([sys.executable, "-m", "bench", "--quick", *args, "--out", str(out)], cwd=ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)  # fmt: skip


def finish_bench(proc: subprocess.Popen[str], out: Path, timeout: int) -> tuple[dict[str, Any], str]:
    """Its results and stdout; it must exit 0, i.e. every benchmark it ran reported `ok`."""
    try:
        stdout, stderr = proc.communicate(timeout=timeout)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, stdout[-3000:] + stderr[-5000:]
    return json.loads(out.read_text()), stdout


def run_bench(tmp_path: Path, *args: str, timeout: int) -> tuple[dict[str, Any], str]:
    out = tmp_path / "results.json"
    return finish_bench(start_bench(out, *args), out, timeout)


# Benchmarks that mostly wait (the stand-ins' beats and hang deadlines, retried runs) run beside the others, each
# group a `python -m bench` process of its own: what each runs and reports is unchanged, the smoke's wall time is
# the slowest group's. Every other benchmark is in the last group.
BESIDE = (("scale", "rendezvous", "k8s", "sweep", "render"), ("hang", "recovery"))


def groups(names: list[str]) -> list[list[str]]:
    found = [[n for n in names if n in group] for group in BESIDE]
    return [*found, [n for n in names if not any(n in group for group in BESIDE)]]


def check_structure(results: dict[str, Any], names: list[str]) -> None:
    """The results file's shape: meta, one `ok` entry per benchmark, and well-formed figures from each (a number
    with its band, or none and why); no timing is judged."""
    assert set(results) == {"meta", "benchmarks", "figures"}
    meta = results["meta"]
    assert meta["quick"] is True and meta["cpus"] >= 1 and meta["duration_s"] > 0
    assert isinstance(meta["load_avg_1min_start"], float) and isinstance(meta["load_avg_1min_end"], float)
    assert list(results["benchmarks"]) == names
    for name, info in results["benchmarks"].items():
        assert info["status"] == "ok" and info["error"] is None and info["seconds"] >= 0, (name, info)
        assert info["figures"] >= 1, f"benchmark {name} reported no figure"
    figures = results["figures"]
    assert len(figures) == sum(info["figures"] for info in results["benchmarks"].values())
    for fig in figures:
        assert set(fig) == FIGURE_KEYS, fig["name"]
        assert fig["name"] and isinstance(fig["unit"], str) and isinstance(fig["detail"], dict)
        assert fig["previous"] is None and fig["drift"] is None  # a fresh file: nothing to compare with
        if fig["median"] is None:
            assert fig["note"].startswith("not available: "), fig
            continue
        assert fig["min"] <= fig["median"] <= fig["max"] and fig["reps"] >= 1, fig
        assert fig["meets"] is None if fig["target"] is None else isinstance(fig["meets"], bool), fig


@pytest.mark.slow  # every benchmark in --quick mode: about 3 minutes
def test_every_benchmark_runs_quick_and_reports_wellformed_figures(tmp_path: Path) -> None:
    """CI runs every CPU benchmark (bench/__main__.py's registry), each on its fewest repetitions and smallest
    sizes, in three groups at once (BESIDE), so a benchmark the code has broken fails here, not when figures are
    due."""
    from bench.__main__ import registry

    names = [n for n in registry() if n != "ranks"]  # ranks: scale's stand-in ranks alone, which scale runs here
    parts = groups(names)
    assert sorted(n for part in parts for n in part) == sorted(names) and all(parts)
    outs = [tmp_path / f"results-{i}.json" for i in range(len(parts))]
    procs = [start_bench(out, "--only", ",".join(part)) for out, part in zip(outs, parts, strict=True)]
    figures, stdout = [], ""
    for proc, out, part in zip(procs, outs, parts, strict=True):
        results, said = finish_bench(proc, out, timeout=900)
        check_structure(results, part)
        figures += results["figures"]
        stdout += said
    by_name = {(f["benchmark"], f["name"]) for f in figures}
    assert ("scale", "render 100 distinct jobs x 4 targets") in by_name  # the render benchmark is scale's first half
    assert ("scale", "trainctl list over 1,000 runs") in by_name
    figs = {(f["benchmark"], f["name"]): f for f in figures}
    lost = figs[("scale", "run store: 8 concurrent `trainctl submit` x 1, records lost")]
    assert lost["median"] == 0 and lost["detail"]["records"] == 8  # every concurrent writer's record kept
    for n in (8, 64):  # the stand-in ranks ran the trainer's watchdog: beats reached the store, the hang was named
        assert figs[("scale", f"{n} stand-in ranks: heartbeat store load")]["median"] > 0
        assert figs[("scale", f"{n} stand-in ranks: hang declared, stopped rank named")]["note"] == ""
    per_node = {
        n: figs[("scale", f"{n} stand-in ranks: heartbeat store load")]["detail"]["per_node_beats"] for n in (8, 64)
    }
    assert per_node == {8: False, 64: True}  # from 64 ranks each node's leader sends its beats (trainer/nodebeat.py)
    assert ("drive", "trainctl validate (local job)") in by_name and ("hang", "hang reported after the last step, "
                                                                      "hang_timeout: 5") in by_name  # fmt: skip
    assert "| benchmark | figure | median |" in stdout and "quick mode" in stdout
    static = figs[("rendezvous", "static rendezvous of 8 stand-in agents (64 ranks)")]  # torchrun's, a fixed size
    assert static["median"] > 0 and static["meets"] is True


@pytest.mark.gpu
@pytest.mark.skipif(CUDA_WHY is not None, reason=CUDA_WHY or "")
def test_the_gpu_benchmark_runs_quick(tmp_path: Path) -> None:
    results, _ = run_bench(tmp_path, "--gpu", timeout=900)
    check_structure(results, ["gpu"])


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

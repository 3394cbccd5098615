"""Sweeps on the local target, end to end: the real driver, launcher, torchrun and trainer (1 process each).

A 2x2 grid of digits with parallel 2 (never more than 2 trials at once, best first in `sweep status`),
cancelling a running sweep, and the median rule stopping a trailing trial (docs/sweeps.md).
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from types import SimpleNamespace

import pytest
from run_cli import trainctl  # tests/support
from trainctl.runs.store import RunStore
from trainctl.sweeps.handle import Sweep

SMALL = ["--set", "resources.procs_per_node=1", "--set", "checkpoint.every_steps=20"]


def started(job_file: Path, *args: str) -> Sweep:
    proc = trainctl("sweep", str(job_file), *SMALL, *args, "--output", "json")
    assert proc.returncode == 0, proc.stderr
    return Sweep.from_id(json.loads(proc.stdout)["id"])


def most_at_once(run_dirs: list[Path]) -> int:
    """The most runs alive at one moment: from submission (spec.json written) to the end (exit.json)."""
    spans = [
        ((d / "spec.json").stat().st_mtime, json.loads((d / "exit.json").read_text())["finished_at"]) for d in run_dirs
    ]
    return max(sum(1 for s, e in spans if s <= t < e) for t, _ in spans)


@pytest.mark.slow  # four trial runs: 44 s on 2 loaded cores
def test_a_2x2_grid_runs_2_at_a_time_and_status_puts_the_best_first(digits_job_file: Path) -> None:
    sweep = started(
        digits_job_file, "--grid", "trainer.lr=1e-3,3e-3", "--grid", "trainer.batch_size=32,64", "--parallel", "2",
        "--set", "trainer.epochs=2",
    )  # fmt: skip
    rows = sweep.wait(timeout=300, poll=1)
    assert [r.state for r in rows] == ["succeeded"] * 4, rows
    runs = [RunStore().get(r.run_id or "") for r in rows]
    assert all(run is not None and run.sweep_id == sweep.id for run in runs)
    dirs = [Path(run.paths.run_dir or "") for run in runs if run is not None]
    assert len(set(dirs)) == 4 and most_at_once(dirs) == 2
    for row, folder in zip(rows, dirs, strict=True):  # the metric is the trainer's own final value
        summary = json.loads((folder / "output" / "summary.json").read_text())
        assert row.metric == summary["val_accuracy"]
    assert [r.metric for r in rows] == sorted((r.metric or 0.0 for r in rows), reverse=True)

    shown = trainctl("sweep", "status", sweep.id)
    assert shown.returncode == 0, shown.stderr
    best = rows[0]
    assert f"best: trial {best.index} (trainer.lr={best.params['trainer.lr']} " in shown.stdout
    assert f"val_accuracy {best.metric:.4f}" in shown.stdout
    as_json = json.loads(trainctl("sweep", "status", sweep.id, "--output", "json").stdout)
    assert [t["index"] for t in as_json["trials"]] == [r.index for r in rows]
    listed = trainctl("list").stdout.splitlines()
    assert listed[0].split()[-1] == "SWEEP" and sum(sweep.id in line for line in listed) == 4


def test_cancelling_a_running_sweep_stops_every_trial(digits_job_file: Path, helpers: SimpleNamespace) -> None:
    sweep = started(digits_job_file, "--grid", "trainer.lr=1e-3,2e-3,3e-3", "--parallel", "2",
                    "--set", "trainer.epochs=200")  # fmt: skip

    def two_running() -> bool:
        ids = [t.run_id for t in sweep.trials() if t.run_id]
        return len(ids) == 2 and all((Path(r.paths.run_dir or "") / "state.json").exists()
                                     for r in map(RunStore().get, ids) if r)  # fmt: skip

    helpers.wait_for(two_running, 60, "two trials running")
    proc = trainctl("cancel", sweep.id)
    assert proc.returncode == 0, proc.stderr
    rows = {r.index: r for r in sweep.rows()}
    assert [rows[i].state for i in range(3)] == ["cancelled", "cancelled", "cancelled"]
    assert rows[2].run_id is None  # the third never started
    for row in rows.values():
        if row.run_id:
            run_dir = (RunStore().get(row.run_id) or sweep).paths.run_dir  # type: ignore[union-attr]
            assert not helpers.processes_mentioning(run_dir), run_dir
    assert not sweep.driver_alive()
    time.sleep(2)
    assert len([t for t in sweep.trials() if t.run_id]) == 2  # and the driver started none after


@pytest.mark.slow  # trial runs to the median rule: 33 s on 2 loaded cores
def test_the_median_rule_stops_a_trailing_trial_and_its_log_says_why(digits_job_file: Path) -> None:
    """3 at once, each compared at its step with the median of the 2 others (min_trials 2): lr 1e-5 trails."""
    sweep = started(
        digits_job_file, "--grid", "trainer.lr=0.01,0.005,0.00001", "--parallel", "3", "--early-stop-after", "20",
        "--set", "trainer.epochs=12", "--set", "trainer.batch_size=64",
    )  # fmt: skip
    rows = {r.index: r for r in sweep.wait(timeout=300, poll=1)}
    assert [rows[i].state for i in range(3)] == ["succeeded", "succeeded", "stopped early"], rows
    assert rows[2].note and "trails the median" in rows[2].note and "median rule after step 20" in rows[2].note
    run = RunStore().get(rows[2].run_id or "")
    assert run is not None
    log = Path(run.paths.log or "").read_text()
    assert "stopped early: val_accuracy" in log and "checkpoint written" in log
    assert list(Path(run.paths.checkpoint_dir or "").glob("step-*")), "it checkpointed before it exited"
    assert (rows[2].step or 0) < 12 * 23  # it was stopped before its 12 epochs
    assert "trial 2 (" in (sweep.folder / "log.txt").read_text()


@pytest.mark.slow  # a sweep driver killed and restarted: 41 s on 2 loaded cores
def test_a_dead_driver_is_started_again_by_sweep_status_and_no_trial_runs_twice(
    digits_job_file: Path, helpers: SimpleNamespace
) -> None:
    import os
    import signal

    sweep = started(digits_job_file, "--grid", "trainer.lr=1e-3,3e-3,5e-3", "--set", "trainer.epochs=1")
    helpers.wait_for(lambda: (sweep.folder / "driver.json").exists() and sweep.trials()[0].run_id, 60, "trial 0")
    pid = json.loads((sweep.folder / "driver.json").read_text())["pid"]
    os.kill(pid, signal.SIGKILL)
    helpers.wait_for(lambda: not sweep.driver_alive(), 10, "the driver gone")
    shown = trainctl("sweep", "status", sweep.id)
    assert shown.returncode == 0 and "the sweep's driver was not running; started it again" in shown.stderr
    rows = sweep.wait(timeout=300, poll=1)
    assert [r.state for r in rows] == ["succeeded"] * 3
    runs = [r for r in RunStore().list() if r.run.sweep_id == sweep.id]
    assert len(runs) == 3 and {r.id for r in runs} == {row.run_id for row in rows}

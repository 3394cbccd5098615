"""Sweeps on the real local SLURM cluster (issue 26): a 2x2 grid of digits is ONE array job, `--array=0-3%2`,
never more than 2 tasks at once although the cluster has room for 4, each task a run in its own folder;
`sweep status` names the best trial with its validation accuracy; cancelling a sweep stops every trial,
the running ones and the one still pending in the array."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from trainctl.runs.store import RunStore
from trainctl.sweeps.handle import Sweep

pytestmark = [pytest.mark.slurm]
TRAINCTL = str(Path(sys.prefix) / "bin" / "trainctl")


def _job_file(tmp_path: Path, data: Path, epochs: int) -> Path:
    job = {
        "name": "sweepy",
        "trainer": {"model": "digits", "batch_size": 64, "epochs": epochs, "lr": 0.003, "log_every": 10},
        "resources": {"nodes": 1, "procs_per_node": 1},
        "data": {"train": str(data / "train.jsonl"), "val": str(data / "val.jsonl")},
        "slurm": {"python_env": sys.prefix, "workdir": str(tmp_path / "w")},
        "env": {"TRAINER_FAILPOINTS": "compute=slow(100)"},  # seconds of training, so running tasks overlap
    }
    path = tmp_path / "sweepy.yaml"
    path.write_text(yaml.safe_dump(job))
    return path


def _start(job_file: Path, *args: str) -> Sweep:
    done = subprocess.run(
        [TRAINCTL, "sweep", str(job_file), "--target", "slurm", *args, "--output", "json"],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    return Sweep.from_id(json.loads(done.stdout)["id"])


def _span(run_dir: Path) -> tuple[float, float]:
    """When the task trained: its first metrics line, and its summary written at the end."""
    first = json.loads((run_dir / "output" / "metrics.jsonl").read_text().splitlines()[0])["time"]
    return first, (run_dir / "output" / "summary.json").stat().st_mtime


def test_a_2x2_grid_is_one_array_job_2_at_a_time(cluster: Any, digits_data: Path, tmp_path: Path, home: Path) -> None:
    job_file = _job_file(tmp_path, digits_data, epochs=1)
    sweep = _start(job_file, "--grid", "trainer.lr=1e-3,3e-3", "--grid", "trainer.batch_size=32,64", "--parallel", "2")
    ids = [t.run_id or "" for t in sweep.trials()]
    array = sweep.record.engine_id
    assert ids == [f"slurm:{array}_{i}" for i in range(4)], ids
    script = Path(f"{tmp_path}/w/sweepy.sweep-{sweep.record.native_id}.sbatch").read_text()
    assert "#SBATCH --array=0-3%2" in script and f"sweepy-%A_%a-{sweep.record.native_id}.out" in script

    rows = sweep.wait(timeout=400, poll=2)
    assert [r.state for r in rows] == ["succeeded"] * 4, [(r.state, r.note) for r in rows]
    runs = [RunStore().get(r.run_id or "") for r in rows]
    dirs = [Path(run.paths.run_dir or "") for run in runs if run is not None]
    names = [f"{array}_{row.index}-{run.run_uid}" for row, run in zip(rows, runs, strict=True) if run is not None]
    assert [d.name for d in dirs] == names and len({r.run_uid for r in runs if r}) == 4  # a folder per task, uid
    spans = [_span(d) for d in dirs]
    at_once = max(sum(1 for s, e in spans if s <= t < e) for t, _ in spans)
    assert at_once == 2, spans  # %2: the 2 nodes x 4 CPUs could run all 4
    for row, folder in zip(rows, dirs, strict=True):
        summary = json.loads((folder / "output" / "summary.json").read_text())
        assert row.metric == summary["val_accuracy"]
        log = Path(RunStore().get(row.run_id or "").paths.log or "").read_text()  # type: ignore[union-attr]
        assert f"batch {row.params['trainer.batch_size']} x" in log, log[-2000:]  # each task ran its own values
        task = (tmp_path / "w" / f"sweepy.sweep-{sweep.record.native_id}" / f"task-{row.index}.sh").read_text()
        lr = row.params["trainer.lr"]
        assert (f"--lr {lr}" in task) if lr != 1e-3 else ("--lr" not in task), task  # 1e-3: the default
    shown = subprocess.run([TRAINCTL, "sweep", "status", sweep.id], capture_output=True, text=True, timeout=60)
    best = rows[0]
    assert f"best: trial {best.index} " in shown.stdout and f"val_accuracy {best.metric:.4f}" in shown.stdout
    print(shown.stdout)


def test_cancelling_a_sweep_stops_the_running_and_the_pending_tasks(
    cluster: Any, digits_data: Path, tmp_path: Path, home: Path
) -> None:
    import time

    sweep = _start(_job_file(tmp_path, digits_data, epochs=300), "--grid", "trainer.lr=1e-3,2e-3,3e-3", "-p", "2")
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        states = [r.state for r in sweep.rows()]
        if states.count("running") == 2:
            break
        time.sleep(1)
    assert sorted(states) == ["queued", "running", "running"], states
    done = subprocess.run([TRAINCTL, "cancel", sweep.id], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        states = [r.state for r in sweep.rows()]
        if states == ["cancelled"] * 3:
            break
        time.sleep(1)
    assert states == ["cancelled"] * 3, states
    assert not sweep.driver_alive()

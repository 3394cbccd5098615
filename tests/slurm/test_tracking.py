"""One MLflow run across a local digits run that is killed and its `--resume-from` on the real SLURM cluster
(issue 25): a real tracking server (tests/support/mlflow_server.py) holds one run, FAILED when the local attempt
died and FINISHED at the end, with the spec's params, provenance and lineage tags, both attempts counted, and a
loss history with every logged step once (a repeat only within one checkpoint interval after the resume)."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from mlflow_server import MlflowServer
from trainctl import Job
from trainctl.runs.store import RunStore

pytestmark = [pytest.mark.slurm, pytest.mark.slow]

EXPERIMENT = "killed-then-resumed"
LOG_EVERY = 2


def _tracked(resume_helpers: Any, data: Path, name: str, procs: int, uri: str, **sections: object) -> dict[str, Any]:
    job = resume_helpers.job(data, name, procs, **sections)
    job["trainer"]["log_every"] = LOG_EVERY
    job["env"] = {"TRAINER_FAILPOINTS": "compute=slow(40)"}  # a few seconds of training: time to kill it midway
    job["tracking"] = {
        "mlflow": {"tracking_uri": uri, "experiment": EXPERIMENT},
        "wandb": {"project": "trainctl-tests", "mode": "offline"},
    }
    return job


def _wandb_history(output_dir: Path) -> tuple[str, list[int]]:
    """The run id and the logged steps of the one offline W&B run under a run's output folder, read with wandb's
    own reader of its transaction log (`wandb leet inspect --json`, wandb 0.31)."""
    (found,) = output_dir.glob("wandb-runs/wandb/offline-run-*/run-*.wandb")
    wandb = Path(sys.prefix) / "bin" / "wandb"
    shown = subprocess.run(
        [str(wandb), "leet", "inspect", "--json", str(found)], capture_output=True, text=True, timeout=120
    )
    assert shown.returncode == 0, shown.stderr
    records = [json.loads(line) for line in shown.stdout.splitlines() if line.startswith("{")]
    assert records, f"{found} ({found.stat().st_size} bytes): {shown.stdout[-2000:]} {shown.stderr[-2000:]}"
    (run_id,) = {r["run"]["run_id"] for r in records if r["type"] == "run"}
    steps = [
        int(r["history"]["step"]["num"]) for r in records if r["type"] == "history" and "loss" in r["history"]["item"]
    ]
    return run_id, steps


def test_one_tracker_run_across_a_killed_local_run_resumed_on_slurm(
    cluster: object, mlflow_server: MlflowServer, digits_data: Path, tmp_path: Path, home: Path, resume_helpers: Any
) -> None:
    source = Job.parse(_tracked(resume_helpers, digits_data, "tracked", 2, mlflow_server.uri)).submit("local")
    tracker = source.tracker_run_id or ""
    assert RunStore().get(source.id).tracker_run_id == tracker != ""  # type: ignore[union-attr]
    deadline = time.monotonic() + 180
    while max((s for s, _ in mlflow_server.history(tracker, "loss")), default=0) < 5 * LOG_EVERY:
        assert time.monotonic() < deadline, "no loss logged within 180 s:\n" + str(source.logs())
        assert not source.status().state.finished, str(source.logs())
        time.sleep(0.2)
    source.cancel()
    assert source.wait(timeout=120, poll=0.2).state.value != "succeeded", "the source ended before it was killed"
    assert mlflow_server.run(tracker)["info"]["status"] == "FAILED"  # the dead attempt, not RUNNING forever

    workdir = tmp_path / "w"
    data = _tracked(
        resume_helpers,
        digits_data,
        "tracked",
        1,
        mlflow_server.uri,
        slurm={"python_env": sys.prefix, "workdir": str(workdir)},
    )
    data["resources"] = {"nodes": 2, "procs_per_node": 1}
    run_id = resume_helpers.on_slurm(data, tmp_path, source.id)
    trainctl = str(Path(sys.prefix) / "bin" / "trainctl")
    moved = RunStore().get(run_id)
    assert moved is not None and moved.tracker_run_id == tracker and moved.resumed_from is not None
    resumed_at = moved.resumed_from.step or 0

    assert [r["info"]["run_id"] for r in mlflow_server.runs(EXPERIMENT)] == [tracker]  # one run, not two
    held = mlflow_server.run(tracker)
    assert held["info"]["status"] == "FINISHED", held["info"]
    params, tags = held["params"], held["tags"]
    assert params["trainer.model"] == "digits" and params["trainer.lr"] == "0.003"
    assert params["resources.procs_per_node"] == "2"  # the first job's spec; the move is in the lineage tag
    assert params["slurm.workdir"] == str(workdir)  # new in the moved job; what it changed is in the lineage
    assert json.loads(tags["trainctl.resumed_from.changes"]) == {
        "resources.nodes": "2",
        "resources.procs_per_node": "1",
    }
    for key in ("spec_sha256", "trainctl_version", "image"):
        assert tags[f"trainctl.{key}"] == str(getattr(moved.provenance, key)), key
    assert tags["trainctl.run"] == run_id and tags["trainctl.resumed_from"] == source.id
    assert tags["trainctl.resumed_from.step"] == str(resumed_at)
    assert tags["trainctl.attempts"] == "2"
    first, second = json.loads(tags["trainctl.attempt.1"]), json.loads(tags["trainctl.attempt.2"])
    assert first["resumed_from_step"] == 0 and "slurm_job_id" not in first
    assert second["resumed_from_step"] == resumed_at and second["slurm_job_id"] == run_id.removeprefix("slurm:")

    shown = subprocess.run([trainctl, "status", run_id], capture_output=True, text=True, timeout=60)
    assert f"tracker run: {tracker} at {mlflow_server.uri}" in shown.stdout, shown.stdout

    history = mlflow_server.history(tracker, "loss")
    steps = [s for s, _ in history]
    summary = json.loads(
        (workdir / "runs" / f"{moved.native_id}-{moved.run_uid}" / "output" / "summary.json").read_text()
    )
    total = summary["steps"]
    assert sorted(set(steps)) == sorted({*range(LOG_EVERY, total + 1, LOG_EVERY), total}), steps  # no gap
    repeated = sorted({s for s in steps if steps.count(s) > 1})
    every = data["checkpoint"]["every_steps"]
    assert all(resumed_at < s <= resumed_at + every for s in repeated), (resumed_at, repeated)  # re-trained steps only
    assert max(s for s in steps if s <= resumed_at) >= 5 * LOG_EVERY  # the killed attempt's steps are there

    local_id, local_steps = _wandb_history(Path(source.paths.output_dir or ""))
    slurm_id, slurm_steps = _wandb_history(Path(moved.paths.output_dir or ""))
    assert local_id == slurm_id == tracker  # W&B: one run id (WANDB_RUN_ID, resume="allow") for both attempts
    assert len(local_steps) >= 5 and set(local_steps) <= {s for s in steps if s <= resumed_at + every}
    assert slurm_steps == [*range(resumed_at + LOG_EVERY - resumed_at % LOG_EVERY, total, LOG_EVERY), total]
    print(
        f"one MLflow run: {len(steps)} loss values over steps {steps[0]}..{total}, resumed at {resumed_at}, repeated {repeated}"
    )


SAYS_IDS = """
import json, os, pathlib
out = pathlib.Path(os.environ["TRAINER_OUTPUT_DIR"])
out.mkdir(parents=True, exist_ok=True)
(out / "ids.json").write_text(json.dumps({k: os.environ.get(k) for k in ("MLFLOW_RUN_ID", "WANDB_RUN_GROUP", "SEED")}))
"""


def test_a_slurm_array_sweeps_trials_each_get_a_tracker_run(
    cluster: Any, mlflow_server: MlflowServer, tmp_path: Path, home: Path
) -> None:
    """Issue 26 with 25: the trials of ONE SLURM array job each log into a tracker run of their own, grouped under
    the sweep (MLflow tag `trainctl.sweep`, W&B's run group): each task's own script carries its trial's ids."""
    job = Job.parse({
        "name": "tracked-array", "command": [sys.executable, "-c", SAYS_IDS], "env": {"SEED": "1"},
        "resources": {"nodes": 1, "procs_per_node": 1}, "slurm": {"python_env": sys.prefix, "workdir": str(tmp_path)},
        "tracking": {"mlflow": {"tracking_uri": mlflow_server.uri, "experiment": "array"},
                     "wandb": {"project": "trainctl-tests", "mode": "offline"}},
    })  # fmt: skip
    sweep = job.sweep("slurm", grid={"env.SEED": ["1", "2"]}, parallel=2)
    rows = sweep.wait(timeout=300, poll=1)
    assert [r.state for r in rows] == ["succeeded", "succeeded"], [(r.state, r.note) for r in rows]
    seen = {}
    for row in rows:
        run = RunStore().get(row.run_id or "")
        assert run is not None and run.tracker_run_id, run
        ids = json.loads((Path(run.paths.output_dir or "") / "ids.json").read_text())
        assert (ids["MLFLOW_RUN_ID"], ids["WANDB_RUN_GROUP"]) == (run.tracker_run_id, sweep.id), ids
        tags = mlflow_server.run(run.tracker_run_id)["tags"]
        assert tags["trainctl.sweep"] == sweep.id and tags["trainctl.run"] == run.id, tags
        seen[ids["SEED"]] = run.tracker_run_id
    assert sorted(seen) == ["1", "2"] and len(set(seen.values())) == 2, seen

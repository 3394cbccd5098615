"""The `tracking:` section on the local target against a real MLflow server (tests/support/mlflow_server.py):
what render shows, a `command:` job whose own MLflow client joins the run trainctl created at submit, and an
API key given through `secrets:` that reaches the program but shows up nowhere trainctl writes."""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from mlflow_server import MlflowServer
from trainctl import Job
from trainctl.errors import JobError
from trainctl.spec.tracking import TrackerRun

TOKEN = "mlf-" + hashlib.sha256(b"trainctl tracking test").hexdigest()[:40]  # the secret the test hunts for
MINE = "mlf-" + hashlib.sha256(b"the submitter's own").hexdigest()[:40]  # the submitter's, for trainctl's calls

JOINS = """
import hashlib, os, pathlib, mlflow
token = os.environ["MLFLOW_TRACKING_TOKEN"]
with mlflow.start_run() as run:  # MLFLOW_RUN_ID: the run trainctl created at submit
    mlflow.log_metric("from_command", 1.5, step=3)
out = pathlib.Path(os.environ["TRAINER_OUTPUT_DIR"])
out.mkdir(parents=True, exist_ok=True)
(out / "joined.json").write_text(
    '{"run": "%s", "token_sha256": "%s"}' % (run.info.run_id, hashlib.sha256(token.encode()).hexdigest())
)
"""


def _job(uri: str, experiment: str, **extra: Any) -> dict[str, Any]:
    return {
        "name": "tracked",
        "command": ["python", "-c", "print('hi')"],
        "tracking": {"mlflow": {"tracking_uri": uri, "experiment": experiment}},
        **extra,
    }


def test_render_shows_the_server_and_no_run_id_which_submit_fixes() -> None:
    job = Job.parse(_job("http://127.0.0.1:5000", "exp", tracking={"wandb": {"project": "p", "mode": "offline"}}))
    text = job.render("local").text
    assert "MLFLOW_TRACKING_URI" not in text and "WANDB_PROJECT=p" in text and "WANDB_RUN_ID" not in text
    both = Job.parse(_job("http://127.0.0.1:5000/", "exp")).render("slurm").text
    assert "export MLFLOW_TRACKING_URI=http://127.0.0.1:5000\n" in both and "MLFLOW_RUN_ID" not in both
    fixed = Job.parse(_job("http://127.0.0.1:5000", "exp")).with_tracker_run(
        TrackerRun(run_id="ab12", experiment_id="7")
    )
    env = fixed.process_env
    assert env["MLFLOW_RUN_ID"] == "ab12" and env["MLFLOW_EXPERIMENT_ID"] == "7"
    assert fixed.to_dict() == Job.parse(_job("http://127.0.0.1:5000", "exp")).to_dict()  # not part of the spec


@pytest.mark.parametrize("name", ["WANDB_API_KEY", "MLFLOW_TRACKING_TOKEN"])
def test_a_tracker_key_in_env_is_refused(name: str) -> None:
    with pytest.raises(JobError, match=f"{name} is a credential: pass it through `secrets:`"):
        Job.parse(_job("http://127.0.0.1:5000", "exp", env={name: "x"}))


def test_a_command_job_joins_the_run_and_its_key_is_written_nowhere(
    mlflow_server: MlflowServer, tmp_path: Path, trainctl_home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MLFLOW_TRACKING_TOKEN", MINE)  # submit's own calls use it, as the MLflow client would
    secrets = trainctl_home / "secrets"  # the local target's secret store: one file per secret
    secrets.mkdir(parents=True, exist_ok=True)
    (secrets / "mlflow-token").write_text(TOKEN)
    data = _job(mlflow_server.uri, "command-joins")
    data["command"] = [str(mlflow_server.python), "-c", JOINS]
    data["secrets"] = [{"env": "MLFLOW_TRACKING_TOKEN", "name": "mlflow-token"}]
    job_file = tmp_path / "job.yaml"
    job_file.write_text(json.dumps(data))
    trainctl = str(Path(sys.prefix) / "bin" / "trainctl")
    rendered = subprocess.run([trainctl, "render", str(job_file)], capture_output=True, text=True, timeout=60)
    assert rendered.returncode == 0 and "mlflow-token" in rendered.stdout, rendered.stderr  # its name only

    run = Job.from_yaml(job_file).submit("local")
    status = run.wait(timeout=240, poll=0.5)
    log = str(run.logs())
    assert status.state.value == "succeeded", log
    joined = json.loads((Path(run.paths.output_dir or "") / "joined.json").read_text())
    assert joined["token_sha256"] == hashlib.sha256(TOKEN.encode()).hexdigest()  # the program had the job's key
    assert joined["run"] == run.tracker_run_id  # ... and its own mlflow.start_run() joined trainctl's run

    held = mlflow_server.run(run.tracker_run_id or "")
    assert held["info"]["status"] == "FINISHED" and held["tags"]["trainctl.run"] == run.id
    assert held["params"]["secrets"] == json.dumps(data["secrets"])  # the spec: the secret's name, no value
    assert held["tags"]["trainctl.spec_sha256"] == run.provenance.spec_sha256  # type: ignore[union-attr]
    assert mlflow_server.history(run.tracker_run_id or "", "from_command") == [(3, 1.5)]
    assert len(mlflow_server.runs("command-joins")) == 1

    shown = subprocess.run([trainctl, "status", run.id, "--output", "json"], capture_output=True, text=True)
    assert shown.returncode == 0, shown.stderr
    written = {
        "render": rendered.stdout + rendered.stderr,
        "log": log,
        "status": shown.stdout + json.dumps(run.status().to_dict()),
        "mlflow": json.dumps(held),
    }
    kept = [p for p in trainctl_home.rglob("*") if p.is_file() and secrets not in p.parents]
    for path in kept:  # the run store and every file of the run's folder
        written[str(path)] = path.read_bytes().decode(errors="replace")
    assert any(Path(run.paths.run_dir or "") in p.parents for p in kept) and len(kept) > 3, kept
    leaked = [where for where, text in written.items() if TOKEN in text or MINE in text]
    assert not leaked, f"a key's value is written in {leaked}"


def _set_running(server: MlflowServer, run_id: str, owner: str) -> None:
    """The run as another attempt would leave it: RUNNING, owned by `owner` (trackers.settle reads both)."""
    server.post("runs/update", {"run_id": run_id, "status": "RUNNING"})
    server.post("runs/set-tag", {"run_id": run_id, "key": "trainctl.run", "value": owner})


def test_a_job_killed_outright_is_failed_by_the_status_refresh(mlflow_server: MlflowServer, helpers: Any) -> None:
    """mlflow#10510: every process of the run SIGKILLed, nothing in the job can say so; `trainctl list --refresh`
    and `run.status()` mark the MLflow run FAILED, and leave alone a run another trainctl run (a `--resume-from`)
    owns by then."""
    data = _job(mlflow_server.uri, "killed-outright")
    data["command"] = ["python", "-c", "import time; print('started', flush=True); time.sleep(300)"]
    run = Job.parse(data).submit("local")
    tracker = run.tracker_run_id or ""
    assert mlflow_server.run(tracker)["info"]["status"] == "RUNNING"  # created at submit
    helpers.wait_for(lambda: "started" in str(run.logs()), 120, "the program to start")
    for proc in helpers.of_run(run.paths.run_dir):
        proc.kill()
    trainctl = str(Path(sys.prefix) / "bin" / "trainctl")
    deadline = time.monotonic() + 120
    while "failed" not in subprocess.run([trainctl, "list", "--refresh"], capture_output=True, text=True).stdout:
        assert time.monotonic() < deadline, "the killed run is not failed after 120 s"
        time.sleep(0.5)
    assert mlflow_server.run(tracker)["info"]["status"] == "FAILED"  # settled by `trainctl list --refresh`

    _set_running(mlflow_server, tracker, run.id)
    assert run.status().state.value == "failed"
    assert mlflow_server.run(tracker)["info"]["status"] == "FAILED"  # ... and by `run.status()`
    _set_running(mlflow_server, tracker, "local:another-run")
    run.status()
    assert mlflow_server.run(tracker)["info"]["status"] == "RUNNING"  # not this run's to settle any more


SAYS_GROUP = """
import json, os, pathlib
out = pathlib.Path(os.environ["TRAINER_OUTPUT_DIR"])
out.mkdir(parents=True, exist_ok=True)
(out / "ids.json").write_text(json.dumps({k: os.environ.get(k) for k in ("MLFLOW_RUN_ID", "WANDB_RUN_GROUP", "SEED")}))
"""


def test_a_sweeps_trials_are_grouped_under_the_sweep(mlflow_server: MlflowServer, helpers: Any) -> None:
    """Issue 26: each trial is a tracker run of its own, grouped under the sweep: MLflow's tag `trainctl.sweep`
    (one filter in its UI), W&B's run group (WANDB_RUN_GROUP, which wandb.init reads) in every process."""
    data = _job(mlflow_server.uri, "swept", env={"SEED": "1"})
    data["tracking"]["wandb"] = {"project": "swept", "mode": "offline"}
    data["command"] = [sys.executable, "-c", SAYS_GROUP]
    sweep = Job.parse(data).sweep("local", grid={"env.SEED": ["1", "2"]}, parallel=2)
    rows = sweep.wait(timeout=180, poll=0.5)
    assert [r.state for r in rows] == ["succeeded", "succeeded"], [(r.state, r.note) for r in rows]
    from trainctl import Run

    seen = set()
    for row in rows:
        run = Run.from_id(row.run_id or "")
        ids = json.loads((Path(run.paths.output_dir or "") / "ids.json").read_text())
        assert ids["MLFLOW_RUN_ID"] == run.tracker_run_id and ids["WANDB_RUN_GROUP"] == sweep.id, ids
        tags = mlflow_server.run(run.tracker_run_id or "")["tags"]
        assert tags["trainctl.sweep"] == sweep.id and tags["trainctl.run"] == run.id, tags
        seen.add((ids["SEED"], run.tracker_run_id))
    assert len(seen) == 2 and {s for s, _ in seen} == {"1", "2"}, seen  # two trials, two tracker runs

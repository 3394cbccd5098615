"""trainer/tracking.py without a server: a tracker that cannot be reached never stops training, and only rank 0
(and only a job with a run id) talks to one."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from mlflow_server import MlflowServer
from trainer.tracking import MlflowRun, Trackers


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])  # closed again when the block ends: nothing listens there


def test_an_unreachable_server_is_one_warning_and_training_goes_on(
    tmp_path: object, capsys: pytest.CaptureFixture[str]
) -> None:
    env = {"MLFLOW_TRACKING_URI": f"http://127.0.0.1:{_closed_port()}", "MLFLOW_RUN_ID": "0" * 32}
    with Trackers(0, 0, str(tmp_path), env) as trackers:
        assert trackers.mlflow is None  # given up after the first call failed
        trackers.log({"kind": "train", "step": 2, "loss": 0.5})
    err = capsys.readouterr().err
    assert err.count("training goes on without MLflow") == 1, err


def test_only_rank_0_and_only_a_submitted_run_log() -> None:
    env = {"MLFLOW_TRACKING_URI": "http://127.0.0.1:9", "MLFLOW_RUN_ID": "ab"}
    assert Trackers(1, 0, "/nonexistent", env).mlflow is None
    assert MlflowRun.from_env({"MLFLOW_TRACKING_URI": "http://127.0.0.1:9"}) is None  # no run id: not trainctl's
    assert MlflowRun.from_env({"MLFLOW_TRACKING_URI": "file:///tmp/mlruns", "MLFLOW_RUN_ID": "ab"}) is None


def test_each_attempt_runs_the_run_again_and_ends_it(mlflow_server: MlflowServer, tmp_path: object) -> None:
    """Against a real server: an attempt sets a FAILED run RUNNING again and counts itself; the loop's end is
    FINISHED, a raise (a crash, the agreed stop of a preemption) FAILED; the metrics keep their steps."""
    run_id = mlflow_server.new_run("attempts")
    env = {"MLFLOW_TRACKING_URI": mlflow_server.uri, "MLFLOW_RUN_ID": run_id, "SLURM_JOB_ID": "41"}
    with pytest.raises(RuntimeError), Trackers(0, 0, str(tmp_path), env) as first:
        first.log({"kind": "train", "step": 2, "loss": 0.5, "world_size": 2, "time": 1795000000.0})
        raise RuntimeError("worker died")
    assert mlflow_server.run(run_id)["info"]["status"] == "FAILED"
    with Trackers(0, 2, str(tmp_path), {**env, "SLURM_JOB_ID": "42"}) as second:
        assert mlflow_server.run(run_id)["info"]["status"] == "RUNNING"  # again, for this attempt
        second.log({"kind": "eval", "step": 4, "val_loss": 0.25})
        second.log({"kind": "straggler", "step": 4, "ratio": 3.0})  # not a metric record: not logged
    held = mlflow_server.run(run_id)
    assert held["info"]["status"] == "FINISHED" and held["tags"]["trainctl.attempts"] == "2"
    attempt = json.loads(held["tags"]["trainctl.attempt.2"])
    assert attempt["slurm_job_id"] == "42" and attempt["resumed_from_step"] == 2
    assert mlflow_server.history(run_id, "loss") == [(2, 0.5)] and mlflow_server.history(run_id, "val_loss") == [
        (4, 0.25)
    ]
    assert mlflow_server.history(run_id, "world_size") == [] and mlflow_server.history(run_id, "ratio") == []


def test_the_launcher_marks_the_run_failed_when_its_workers_fail(mlflow_server: MlflowServer, tmp_path: Path) -> None:
    """A worker that dies before the trainer could say anything (here: a program that exits 3) leaves the run
    to the launcher, which sees torchrun fail."""
    run_id = mlflow_server.new_run("launcher")
    env = {**os.environ, "MLFLOW_TRACKING_URI": mlflow_server.uri, "MLFLOW_RUN_ID": run_id,
           "TRAINER_OUTPUT_DIR": str(tmp_path / "output")}  # fmt: skip
    argv = [sys.executable, "-m", "trainer.launch", "--platform", "local", "--nproc-per-node", "1", "--",
            sys.executable, "-c", "raise SystemExit(3)"]  # fmt: skip
    done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=180, cwd=tmp_path)
    assert done.returncode != 0 and f"MLflow run {run_id} marked FAILED" in done.stderr, done.stderr[-3000:]
    assert mlflow_server.run(run_id)["info"]["status"] == "FAILED"

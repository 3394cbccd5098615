"""trainer/tracking.py without a server: a tracker that cannot be reached never stops training, and only rank 0
(and only a job with a run id) talks to one."""

from __future__ import annotations

import json
import socket

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

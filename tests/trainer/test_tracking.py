"""trainer/tracking.py without a server: a tracker that cannot be reached never stops training, and only rank 0
(and only a job with a run id) talks to one."""

from __future__ import annotations

import socket

import pytest
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

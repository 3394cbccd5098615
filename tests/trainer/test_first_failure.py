"""The launcher's first-failure record (trainer/first_failure.py) from torch's own objects: error files written
by torch's ErrorHandler (what `@record` writes), read back by torch's ProcessFailure, as ChildFailedError
holds them; its compact form (the Kubernetes termination message) and its text (SageMaker's failure file)."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest
from torch.distributed.elastic.multiprocessing.errors import ChildFailedError, ProcessFailure, get_error_handler
from trainer import first_failure, records


def _error_file(path: Path, monkeypatch: pytest.MonkeyPatch, exc: Exception, at: float) -> str:
    monkeypatch.setenv("TORCHELASTIC_ERROR_FILE", str(path))
    try:
        raise exc
    except Exception as raised:
        get_error_handler().record_exception(raised)
    os.utime(path, (at, at))
    return str(path)


def test_the_first_error_file_written_names_the_rank(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Both ranks fail within one second: torch's timestamps tie (whole seconds) and its first failure is the
    lower rank, whose error is the consequence; the error files' mtimes say rank 1 was first."""
    second = float(int(time.time()))
    peer = _error_file(tmp_path / "0.json", monkeypatch, RuntimeError("Connection closed by peer"), second + 0.6)
    boom = _error_file(tmp_path / "1.json", monkeypatch, RuntimeError("boom on rank 1 at epoch 2"), second + 0.2)
    failures = {0: ProcessFailure(0, 100, 1, peer), 1: ProcessFailure(1, 101, 1, boom)}
    failures[0].timestamp = failures[1].timestamp = int(second)
    assert ChildFailedError("boom", failures).get_first_failure()[0] == 0  # torch's tie
    tails = {1: ["epoch 2 on rank 1", "RuntimeError: boom on rank 1 at epoch 2"]}
    rec = first_failure.record(failures, {}, tails, "n2")
    assert (rec["rank"], rec["node"], rec["exception"], rec["message"]) == (
        1,
        "n2",
        "RuntimeError",
        "boom on rank 1 at epoch 2",
    )
    assert rec["log_tail"] == tails[1] and rec["exit_code"] == 1 and rec["ranks_failed"] == [0, 1]
    assert first_failure.headline(rec) == "rank 1 on n2 failed (exit 1): RuntimeError: boom on rank 1 at epoch 2"
    several = {**rec, "message": "bad config:\n  lr: not a number"}  # one line: its first
    assert first_failure.headline(several) == "rank 1 on n2 failed (exit 1): RuntimeError: bad config:"


def test_a_rank_torchrun_stopped_is_never_first_beside_one_that_failed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Rank 1 raised; torchrun then stopped rank 0 (SIGTERM), which wrote no error file. When the launcher
    has not yet read the end of rank 0's output (a loaded machine), rank 0's time is torch's whole-second
    timestamp, earlier than rank 1's error file: rank 1 is still the first failure, and the exit code 1.
    A run stopped as a whole (every rank SIGTERM) still names a rank, by time."""
    second = float(int(time.time()))
    boom = _error_file(tmp_path / "1.json", monkeypatch, RuntimeError("boom on rank 1 at epoch 2"), second + 0.4)
    failures = {0: ProcessFailure(0, 100, -15, str(tmp_path / "none.json")), 1: ProcessFailure(1, 101, 1, boom)}
    failures[0].timestamp = failures[1].timestamp = int(second)
    rec = first_failure.record(failures, {}, {1: ["RuntimeError: boom on rank 1 at epoch 2"]}, "algo-1")
    assert (rec["rank"], rec["exit_code"], rec["exception"]) == (1, 1, "RuntimeError")
    both = {r: ProcessFailure(r, 100 + r, -15, str(tmp_path / "none.json")) for r in (0, 1)}
    stopped = first_failure.record(both, {0: second + 0.9, 1: second + 0.3}, {}, "n1")
    assert (stopped["rank"], stopped["exit_code"]) == (1, 143)


def test_without_an_error_file_the_last_lines_say_it(tmp_path: Path) -> None:
    """A program that wrote no error file: a signal is named; a Python traceback in its last lines gives the
    exception; a shell script's last lines are all there is."""
    killed = {3: ProcessFailure(1, 7, -9, str(tmp_path / "none.json"))}
    rec = first_failure.record(killed, {3: 5.0}, {3: ["step 9"]}, "n1")
    assert (rec["rank"], rec["exit_code"], rec["signal"], rec["exception"]) == (3, 137, "SIGKILL", None)
    assert first_failure.headline(rec) == "rank 3 on n1 failed (signal SIGKILL)"
    lines = ["Traceback (most recent call last):", '  File "t.py", line 1', "KeyError: 'lr'", "cleanup done"]
    assert first_failure.from_tail(lines) == ("KeyError", "'lr'")
    assert first_failure.from_tail(["error: no such file", "exit 3"]) == (None, None)


def test_compact_and_text_keep_the_newest_lines_within_their_limits() -> None:
    rec = {"kind": "error", "source": "launcher", "time": 1.0, "rank": 1, "node": "n1", "exit_code": 1,
           "exception": "RuntimeError", "message": "boom " * 400, "log_tail": [f"line {i} " + "x" * 90 for i in range(60)]}  # fmt: skip
    short = records.compact(rec)
    parsed = json.loads(short)
    assert len(short.encode()) <= records.TERMINATION_LIMIT and (parsed["rank"], parsed["node"]) == (1, "n1")
    assert parsed["log_tail"][-1] == rec["log_tail"][-1] and len(parsed["log_tail"]) < 60
    assert len(parsed["message"]) == 1024
    text = first_failure.text(rec)
    assert len(text.encode()) <= 1000 and text.endswith(rec["log_tail"][-1]) and "last lines of rank 1:" in text
    # the oracle for what SageMaker keeps: botocore's service model of DescribeTrainingJob's FailureReason
    import botocore.session

    model = botocore.session.get_session().get_service_model("sagemaker")
    kept = model.shape_for("DescribeTrainingJobResponse").members["FailureReason"].metadata["max"]
    assert len(f"AlgorithmError: {text}") <= kept, kept

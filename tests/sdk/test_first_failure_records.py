"""How the SDK reads a program's error record on each channel (issue 37 section 1): failure.json's `kind: error`
as `status` shows it, the pods' termination messages (the first failure of several pods), and SageMaker's
FailureReason, each from what the trainer's launcher writes (trainer/first_failure.py, trainer/records.py)."""

from __future__ import annotations

import json

from trainctl.runs import records as run_records
from trainctl.runs.state import RunState, RunStatus
from trainctl.targets.kubernetes.causes import termination_record
from trainctl.targets.sagemaker.causes import classify, failure_of
from trainer import first_failure, records

REC = {"kind": "error", "source": "launcher", "time": 10.0, "failed_at": 9.5, "rank": 1, "node": "n2", "exit_code": 1,
       "exception": "RuntimeError", "message": "boom on rank 1 at epoch 2",
       "log_tail": ["epoch 2 on rank 1", "RuntimeError: boom on rank 1 at epoch 2"]}  # fmt: skip
HEADLINE = "rank 1 on n2 failed (exit 1): RuntimeError: boom on rank 1 at epoch 2"


def _pod(message: str, code: int = 1) -> dict[str, object]:
    return {"status": {"containerStatuses": [{"state": {"terminated": {"exitCode": code, "message": message}}}]}}


def test_status_says_the_record_instead_of_the_exit_code() -> None:
    failed = RunStatus(state=RunState.FAILED, reason="exit code 1", failure=run_records.failure(REC))
    shown = run_records.explained(failed)
    assert shown.reason == HEADLINE == first_failure.headline(REC) and shown.log_tail == REC["log_tail"]
    cancelled = failed.model_copy(update={"state": RunState.CANCELLED})
    assert run_records.explained(cancelled).reason == "exit code 1"


def test_the_pods_first_failure_is_the_earliest_error_and_a_verdict_comes_first() -> None:
    later = {**REC, "rank": 0, "node": "n1", "failed_at": 9.9, "message": "Connection closed by peer"}
    pods = [_pod(records.compact(later)), _pod("not json"), _pod(records.compact(REC))]
    found = termination_record(pods)
    assert found is not None and (found["rank"], found["node"]) == (1, "n2") and found["log_tail"] == REC["log_tail"]
    hang = {"kind": "hang", "time": 10.0, "exit_code": 200, "suspects": [{"node": "n3", "rank": 2}]}
    assert termination_record([*pods, _pod(json.dumps(hang), 200)])["kind"] == "hang"  # type: ignore[index]


def test_sagemaker_failure_reason_reads_back_the_launchers_text() -> None:
    reason = f"AlgorithmError: {first_failure.text(REC)}"
    found = failure_of(reason)
    assert found is not None and run_records.failure_line(found) == HEADLINE and found.log_tail == REC["log_tail"]
    assert classify(reason).cause == "application_error"
    signalled = failure_of("AlgorithmError: rank 0 on algo-2 failed (signal SIGKILL)")
    assert signalled is not None and (signalled.signal, signalled.exception, signalled.log_tail) == (
        "SIGKILL",
        None,
        [],
    )
    assert failure_of("AlgorithmError: training failed with exit code 3") is None
    assert failure_of("ClientError: rank 1 on algo-1 failed (exit 1)") is None

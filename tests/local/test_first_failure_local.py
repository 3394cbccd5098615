"""Issue 37 section 1 on the local target, through the real launcher and torchrun (2 gloo processes): a failed
run names its first failing rank, its node, the exception and message, and that rank's last lines, in
`status` (text and json), `list`, `wait(check=True)` and the notebook display; a built-in trainer run with a
bad model says the trainer's own message, not `exit code 2`."""

from __future__ import annotations

import json
import socket
import sys
from pathlib import Path

import pytest
from run_cli import trainctl  # tests/support
from trainctl import Job, RunState
from trainctl.run import RunFailed

pytestmark = pytest.mark.slow
BOOM = Path(__file__).resolve().parents[1] / "programs" / "boom" / "boom_rank1.py"
HEADLINE = f"rank 1 on {socket.gethostname()} failed (exit 1): RuntimeError: boom on rank 1 at epoch 2"


def test_rank_1_raising_is_named_everywhere(cleanup_runs: list[object]) -> None:
    job = Job.parse({"name": "boom", "command": [sys.executable, str(BOOM)], "resources": {"procs_per_node": 2}})
    run = job.submit("local")
    cleanup_runs.append(run)
    with pytest.raises(RunFailed) as failed:
        run.wait(timeout=120, poll=0.2, check=True)
    log = str(run.logs())
    assert HEADLINE in str(failed.value) and "  RuntimeError: boom on rank 1 at epoch 2" in str(failed.value), log
    status = run.status()
    assert status.state is RunState.FAILED and status.reason == HEADLINE, (status, log)
    assert status.failure is not None and (status.failure.rank, status.failure.exception) == (1, "RuntimeError")
    assert status.log_tail[-1] == "RuntimeError: boom on rank 1 at epoch 2" and "epoch 2 on rank 1" in status.log_tail

    shown = json.loads(trainctl("status", run.id, "--output", "json").stdout)
    failure = shown["failure"]
    assert (failure["rank"], failure["node"], failure["exception"], failure["message"]) == (
        1, socket.gethostname(), "RuntimeError", "boom on rank 1 at epoch 2")  # fmt: skip
    assert shown["log_tail"] == failure["log_tail"] and "epoch 2 on rank 1" in shown["log_tail"], shown
    text = trainctl("status", run.id).stdout
    assert f"reason: {HEADLINE}" in text and "last lines of rank 1:" in text, text
    listed = trainctl("list", "--output", "json").stdout
    assert HEADLINE in listed, listed
    assert "RuntimeError: boom on rank 1 at epoch 2" in run._repr_html_()


def test_a_bad_model_says_the_trainers_message(digits_job_file: Path, cleanup_runs: list[object]) -> None:
    """validate refuses an unknown model name; a model argument the model does not take is the trainer's to find."""
    job = Job.from_yaml(digits_job_file).with_overrides(
        ['trainer.model_args={"widht": 3}', "resources.procs_per_node=1"]
    )
    run = job.submit("local")
    cleanup_runs.append(run)
    status = run.wait(timeout=120, poll=0.2)
    assert status.state is RunState.FAILED and status.exit_code == 2, status
    assert status.reason.startswith(f"rank 0 on {socket.gethostname()} failed (exit 2): TrainerInputError: model 'digits': "
                                    "bad model_args"), (status, str(run.logs()))  # fmt: skip
    assert "widht" in status.reason and "exit code 2" not in status.reason
    assert trainctl("list").stdout.count("TrainerInputError: model 'digits'") == 1

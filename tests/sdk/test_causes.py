"""Causes of an attempt's end, per target, table-tested; `retry_on`'s rule; the SLURM batch script's attempt
lines run in bash as the batch host runs them, with no Python (tests/sdk/test_retry_shell.py has their tables)."""

from __future__ import annotations

import shlex
import subprocess
import sys
from pathlib import Path

import pytest
from trainctl.job import Job
from trainctl.runs import causes
from trainctl.runs.causes import Cause
from trainctl.targets.local.causes import classify as local_classify
from trainctl.targets.sagemaker.causes import classify as sagemaker_classify
from trainctl.targets.slurm import retry_script
from trainctl.targets.slurm.status import attempts_of

ROOT = Path(__file__).resolve().parents[2]
HANG = {"kind": "hang", "time": 100.0, "exit_code": 200,
        "suspects": [{"node": "n2", "rank": 1, "why": "no heartbeat"}, {"node": "n2", "rank": 2}]}  # fmt: skip
SLOW = {"kind": "slow_node", "time": 100.0, "suspects": [{"node": "n3", "rank": 2}]}


def test_exit_codes_are_the_trainers():
    sys.path.insert(0, str(ROOT / "trainer_image"))
    try:
        from trainer import exit_codes
    finally:
        sys.path.pop(0)
    assert causes.EXIT_BAD_INPUT == exit_codes.EXIT_BAD_INPUT
    assert causes.EXIT_PREEMPTED == exit_codes.EXIT_PREEMPTED
    assert causes.EXIT_HANG == exit_codes.EXIT_HANG
    assert causes.EXIT_SLOW_NODE == exit_codes.EXIT_SLOW_NODE


@pytest.mark.parametrize(
    ("code", "record", "cause"),
    [
        (2, None, Cause.INVALID),
        (200, HANG, Cause.HANG),
        (200, None, Cause.HANG),
        (201, SLOW, Cause.SLOW_NODE),
        (143, None, Cause.PREEMPTED),
        (-15, None, Cause.PREEMPTED),
        (1, None, Cause.APPLICATION_ERROR),
        (137, None, Cause.APPLICATION_ERROR),
        (-9, None, Cause.APPLICATION_ERROR),
        (1, HANG, Cause.HANG),  # a launcher that exits 1 after the trainer's verdict: the verdict wins
    ],
)
def test_local_causes(code, record, cause):
    assert local_classify(code, record).cause is cause


def test_retry_on_bounds_and_invalid():
    assert causes.retried(Cause.HANG, causes.DEFAULT_RETRY_ON, attempt=1, retries=2)
    assert causes.retried(Cause.HANG, causes.DEFAULT_RETRY_ON, attempt=2, retries=2)
    assert not causes.retried(Cause.HANG, causes.DEFAULT_RETRY_ON, attempt=3, retries=2)  # retries + 1 attempts
    assert not causes.retried(Cause.INVALID, [c.value for c in Cause], attempt=1, retries=5)
    assert not causes.retried(Cause.APPLICATION_ERROR, ["hang", "node_lost"], attempt=1, retries=2)
    assert causes.failure_of_attempt(HANG, started_at=50.0) == HANG
    assert causes.failure_of_attempt(HANG, started_at=500.0) is None  # an earlier attempt's verdict


def test_retry_on_in_the_job():
    base = {"name": "j", "command": ["python", "x.py"], "retries": 1}
    assert Job(**base).retry_on == list(causes.DEFAULT_RETRY_ON)
    assert Job(**base, retry_on=["hang", "node_lost"]).retry_on == [Cause.HANG, Cause.NODE_LOST]
    for wrong in (["invalid"], ["hung"]):
        with pytest.raises(ValueError, match="retry_on"):
            Job(**base, retry_on=wrong)


def _attempt(tmp_path: Path, rc: int, log_lines: list[str], verdict: str | None, env: dict[str, str]):
    """One attempt of the batch script's retry lines in bash: its start, then `srun` (here: the lines it and the
    trainer would write), then its end; no Python on PATH (a python3 that exits 1) and a scontrol that records."""
    before = retry_script.setup_lines(str(tmp_path / "job-%j.out"), str(tmp_path / "ckpt"), str(tmp_path / "out"),
                                      1, ["hang", "node_lost"], False)  # fmt: skip
    srun = [f"printf '%s\\n' {shlex.join(log_lines)} >> {tmp_path}/job-7.out" if log_lines else ":"]
    if verdict is not None:
        srun.append(f"printf %s {shlex.quote(verdict)} > {tmp_path}/out/verdict.txt")
    script = "\n".join(
        ["set -euo pipefail", *before, *srun, f"rc={rc}", *retry_script.end_lines(1, False), "echo done"]
    )
    return subprocess.run(["bash", "-c", script], env=env, capture_output=True, text=True, timeout=60)


def test_slurm_attempts_record_and_decide_in_bash_without_python(tmp_path):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "python3").write_text("#!/bin/sh\nexit 1\n")
    (bin_dir / "scontrol").write_text(f'#!/bin/sh\necho "$*" >> {tmp_path}/scontrol-calls\n')
    # a sinfo that does not answer (this machine's would wait 9-18 s for a controller): SLURM decides the fit
    (bin_dir / "sinfo").write_text("#!/bin/sh\nexit 1\n")
    for tool in bin_dir.iterdir():
        tool.chmod(0o755)
    env = {"PATH": f"{bin_dir}:/usr/bin:/bin", "TRAINCTL_RUN_DIR": str(tmp_path), "TRAINCTL_RUN_UID": "u1",
           "SLURM_JOB_ID": "7", "SLURM_JOB_NODELIST": "n[1-2]", "SLURM_JOB_NUM_NODES": "2",
           "SLURM_JOB_PARTITION": "debug"}  # fmt: skip
    (tmp_path / "ckpt" / "step-00000040").mkdir(parents=True)
    (tmp_path / "out").mkdir()
    (tmp_path / "job-7.out").write_text("old attempt's lines\n")
    first = _attempt(
        tmp_path, 200, ["srun: error: n1: task 0: Exited with exit code 200"], "kind=hang\nnodes=n2\n", env
    )
    assert first.returncode == 200 and "done" not in first.stdout, first.stderr  # requeued: the script ends there
    assert "attempt 1 ended: hang (exit 200), blamed: n2; retry 1 of 1, excluding n2: requeueing job 7" in first.stderr
    assert (tmp_path / "scontrol-calls").read_text().splitlines() == ["requeue 7", "update JobId=7 ExcNodeList=n2"]
    second = _attempt(tmp_path, 1, ["srun: error: n1: task 0: Exited with exit code 1"], None, env)
    assert second.returncode == 0 and "done" in second.stdout, second.stderr
    assert "attempt 2 ended: application_error (exit 1), blamed: n2" not in second.stderr  # verdict.txt was the first's
    assert "attempt 2 ended: application_error (exit 1); not in retry_on" in second.stderr
    records = attempts_of((tmp_path / "attempts.jsonl").read_text().splitlines())
    assert [(a.number, a.cause, a.exit_code, a.blamed_nodes, a.resumed_from_step) for a in records] == [
        (1, Cause.HANG, 200, ["n2"], 40), (2, Cause.APPLICATION_ERROR, 1, [], 40)]  # fmt: skip
    assert all(a.engine_id == "7" and a.started_at <= a.ended_at for a in records)
    # a third start (SLURM requeued it by hand): both attempts used (retries: 1), so no third runs
    third = _attempt(tmp_path, 0, [], None, env)
    assert third.returncode == 1 and "2 attempt(s) ended and retries is 1: not starting another" in third.stderr


@pytest.mark.parametrize(
    ("reason", "secondary", "cause"),
    [
        ("AlgorithmError: training stopped on bad input (exit 2): no such model", "Failed", Cause.INVALID),
        ("AlgorithmError: a hang (exit 200): no step for 60 s; the suspects are in failure.json", "Failed", Cause.HANG),
        ("AlgorithmError: a slow node was excluded after a checkpoint (exit 201): algo-2", "Failed", Cause.SLOW_NODE),
        ("AlgorithmError: training failed with exit code 1", "Failed", Cause.APPLICATION_ERROR),
        ("AlgorithmError: ExecuteUserScriptError: ExitCode 2", "Failed", Cause.INVALID),
        ("AlgorithmError: Please use an instance type with more memory", "Failed", Cause.OUT_OF_MEMORY),
        ("InternalServerError: We encountered an internal error. Please try again.", "Failed", Cause.NODE_LOST),
        ("CapacityError: Unable to provision requested ML compute capacity.", "Failed", Cause.NODE_LOST),
        ("ClientError: Data download failed", "Failed", Cause.INVALID),
        ("", "MaxWaitTimeExceeded", Cause.PREEMPTED),
        ("", "Stopped", None),
    ],
)
def test_sagemaker_causes(reason, secondary, cause):
    assert sagemaker_classify(reason, secondary).cause is cause

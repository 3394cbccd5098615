"""Causes of an attempt's end, per target, table-tested; `retry_on`'s rule; the SLURM attempts program run
as the batch script runs it (python3, one file, no trainctl installed)."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest
from trainctl import causes
from trainctl.causes import Cause
from trainctl.job import Job
from trainctl.targets.local.causes import classify as local_classify
from trainctl.targets.sagemaker.causes import classify as sagemaker_classify
from trainctl.targets.slurm import retry_script
from trainctl.targets.slurm.causes import classify as slurm_classify
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
    assert local_classify(code, record) is cause


def _task(node: str, task: str, what: str) -> str:
    return f"srun: error: {node}: {task}: {what}"


@pytest.mark.parametrize(
    ("rc", "lines", "record", "state", "cause", "blamed"),
    [
        (0, [], None, "", None, []),
        # the srun 143 bug: n1 failed, srun's --kill-on-bad-exit SIGTERMed n2, whose trainer checkpointed (143)
        (143, [_task("n1", "task 0", "Exited with exit code 1"), _task("n2", "task 1", "Exited with exit code 143")],
         None, "", Cause.APPLICATION_ERROR, []),
        (143, [_task("n2", "task 1", "Exited with exit code 2"), _task("n1", "task 0", "Exited with exit code 143")],
         None, "", Cause.INVALID, []),
        # a real preemption: every task checkpointed on SLURM's signal
        (143, [_task("n1", "task 0", "Exited with exit code 143"), _task("n2", "task 1", "Exited with exit code 143")],
         None, "", Cause.PREEMPTED, []),
        (143, [], None, "", Cause.PREEMPTED, []),
        # the first task srun saw end checkpointed (143); srun then ended the other itself: still a preemption
        # (as SLURM 22.05 printed it in tests/slurm/test_e2e.py's preemption test)
        (143, [_task("n1", "task 0", "Exited with exit code 143"), _task("n2", "task 1", "Terminated")],
         None, "", Cause.PREEMPTED, []),
        # the trainer's verdict names the node even when srun's highest code is a peer's 143
        (200, [_task("n1", "task 0", "Exited with exit code 200"), _task("n2", "task 1", "Killed")],
         HANG, "", Cause.HANG, ["n2"]),
        (201, [], SLOW, "", Cause.SLOW_NODE, ["n3"]),
        (1, ["srun: error: Node failure on n3", _task("n3", "task 2", "Killed")], None, "", Cause.NODE_LOST, ["n3"]),
        (0, [], None, "NODE_FAIL", Cause.NODE_LOST, []),
        (137, ["slurmstepd: error: Detected 1 oom_kill event in StepId=7.0. Some of your processes may have been "
               "killed by the cgroup out-of-memory handler.", _task("n2", "task 1", "Out Of Memory")],
         None, "", Cause.OUT_OF_MEMORY, ["n2"]),
        (9, [_task("n1", "tasks 0-1", "Segmentation fault")], None, "", Cause.APPLICATION_ERROR, []),
        (1, [], None, "", Cause.APPLICATION_ERROR, []),
    ],
)  # fmt: skip
def test_slurm_causes(rc, lines, record, state, cause, blamed):
    found, nodes, words = slurm_classify(rc, lines, record, state)
    assert (found, nodes) == (cause, blamed)
    assert words or cause is None


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


def _program(tmp_path: Path, *args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    script = tmp_path / "attempts.py"
    script.write_text(retry_script.program_text())
    flags = ["--log", str(tmp_path / "job.out"), "--checkpoint-dir", str(tmp_path / "ckpt"),
             "--output-dir", str(tmp_path / "out"), "--retries", "1", "--retry-on", "hang,node_lost"]  # fmt: skip
    # a clean python3, no trainctl on its path: as on a cluster node
    return subprocess.run(["python3", "-I", str(script), *args, *flags], env=env, capture_output=True, text=True)


def test_slurm_attempts_program_records_and_decides(tmp_path):
    # no SLURM commands on its PATH: with none, each decision is left to SLURM (and this machine's scontrol and
    # sinfo would wait 9-18 s apiece for a controller that is not running)
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "python3").symlink_to(getattr(sys, "_base_executable", sys.executable))  # not the venv: no trainctl
    env = {"PATH": str(bin_dir), "TRAINCTL_RUN_DIR": str(tmp_path), "SLURM_JOB_ID": "7",
           "SLURM_JOB_NODELIST": "n[1-2]"}  # fmt: skip
    (tmp_path / "ckpt" / "step-00000040").mkdir(parents=True)
    (tmp_path / "out").mkdir()
    (tmp_path / "job.out").write_text("old attempt's lines\n")
    assert _program(tmp_path, "start", env=env).returncode == 0
    with open(tmp_path / "job.out", "a") as log:
        log.write(_task("n1", "task 0", "Exited with exit code 200") + "\n")
    (tmp_path / "out" / "failure.json").write_text(json.dumps({**HANG, "time": time.time()}))
    done = _program(tmp_path, "end", "200", env=env)
    assert done.stdout.strip() == "requeue n2", done.stderr  # sinfo is not here: SLURM decides whether it fits
    assert "attempt 1 ended: hang (exit 200), blamed: n2; retry 1 of 1, excluding n2" in done.stderr
    assert _program(tmp_path, "start", env=env).returncode == 0
    with open(tmp_path / "job.out", "a") as log:
        log.write(_task("n1", "task 0", "Exited with exit code 1") + "\n")
    done = _program(tmp_path, "end", "1", env=env)
    assert done.stdout.strip() == "stop"
    assert "attempt 2 ended: application_error (exit 1); no retries left (retries: 1)" in done.stderr
    records = attempts_of((tmp_path / "attempts.jsonl").read_text().splitlines())
    assert [(a.number, a.cause, a.exit_code, a.blamed_nodes, a.resumed_from_step) for a in records] == [
        (1, Cause.HANG, 200, ["n2"], 40), (2, Cause.APPLICATION_ERROR, 1, [], 40)]  # fmt: skip
    # a third start: both attempts used (retries: 1), so no third runs
    started = _program(tmp_path, "start", env=env)
    assert started.returncode == 3 and "not starting another" in started.stderr


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
    assert sagemaker_classify(reason, secondary) is cause

"""One attempt end, the same words on every target: each target's classifier turns its engine's words into one
`AttemptEnd`, and the line each logs when an attempt ends is `causes.end_line`'s.

Each row is one end as the engines say it: the local launcher's exit code, a Kubernetes pod's terminated state,
srun's task lines and exit code in the SLURM batch script (run in bash, no Python), SageMaker's FailureReason.
The trainer's record is the same on each (failure.json; verdict.txt for the SLURM script)."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import pytest
from trainctl.runs.causes import AttemptEnd, Cause, end_line, why_not_retried
from trainctl.targets.kubernetes.attempts import Record, decide
from trainctl.targets.kubernetes.causes import attempt_of
from trainctl.targets.local.causes import classify as local_classify
from trainctl.targets.sagemaker.causes import classify as sagemaker_classify
from trainctl.targets.slurm import retry_script

HANG_RECORD = {"kind": "hang", "time": 100.0, "suspects": [{"rank": 3, "node": "n2"}]}

# (name, exit code, the trainer's record, SageMaker's FailureReason, retry_on, expected words)
ROWS: list[tuple[str, int, dict[str, Any] | None, str, list[str], str]] = [
    ("hang", 200, HANG_RECORD, "AlgorithmError: a hang (exit 200): no step for 60 s", ["hang"], "hang (exit 200)"),
    ("bad input", 2, None, "AlgorithmError: training stopped on bad input (exit 2)", ["hang"], "invalid (exit 2)"),
    ("program error, retried", 3, None, "AlgorithmError: training failed with exit code 3",
     ["application_error"], "application_error (exit 3)"),
    ("program error, not listed", 1, None, "AlgorithmError: training failed with exit code 1", ["hang"],
     "application_error (exit 1)"),
]  # fmt: skip


def _pod(node: str, code: int) -> dict[str, Any]:
    terminated = {"exitCode": code, "reason": "Error" if code else "Completed"}
    return {"spec": {"nodeName": node}, "status": {"containerStatuses": [{"state": {"terminated": terminated}}]}}


def _slurm_line(tmp_path: Path, code: int, record: dict[str, Any] | None, retry_on: list[str]) -> str:
    """The SLURM batch script's own line for attempt 1, run in bash with srun's words for a failure of task 0 on n1."""
    out = tmp_path / "out"
    out.mkdir()
    (tmp_path / "ckpt").mkdir()
    (tmp_path / "job-7.out").write_text("")
    verdict = ""
    if record and record.get("kind") == "hang":
        verdict = "kind=hang\nnodes=" + ",".join(s["node"] for s in record["suspects"]) + "\n"
    before = retry_script.setup_lines(str(tmp_path / "job-%j.out"), str(tmp_path / "ckpt"), str(out), 1, retry_on,
                                      False)  # fmt: skip
    srun = [f"echo 'srun: error: n1: task 0: Exited with exit code {code}' >> {tmp_path}/job-7.out"]
    if verdict:
        srun.append(f"printf '{verdict}' > {out}/verdict.txt")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for tool, body in (("scontrol", "exit 0"), ("sinfo", "exit 1"), ("python3", "exit 1")):
        (bin_dir / tool).write_text(f"#!/bin/sh\n{body}\n")
        (bin_dir / tool).chmod(0o755)
    env = {"PATH": f"{bin_dir}:/usr/bin:/bin", "TRAINCTL_RUN_DIR": str(tmp_path), "TRAINCTL_RUN_UID": "u1",
           "SLURM_JOB_ID": "7", "SLURM_JOB_NODELIST": "n[1-2]", "SLURM_JOB_NUM_NODES": "2",
           "SLURM_JOB_PARTITION": "debug"}  # fmt: skip
    script = "\n".join(["set -euo pipefail", *before, *srun, f"rc={code}", *retry_script.end_lines(1, False)])
    done = subprocess.run(["bash", "-c", script], env=env, capture_output=True, text=True, timeout=60)
    (line,) = [x for x in done.stderr.splitlines() if x.startswith("trainctl: attempt 1 ended:")]
    return line.removeprefix("trainctl: ")


@pytest.mark.parametrize(("name", "code", "record", "reason", "retry_on", "words"), ROWS, ids=[r[0] for r in ROWS])
def test_one_end_reads_the_same_on_every_target(
    tmp_path: Path, name: str, code: int, record: dict[str, Any] | None, reason: str, retry_on: list[str], words: str
) -> None:
    blamed = ", blamed: n2" if record else ""
    local = local_classify(code, record)
    pods = [_pod("n1", code), _pod("n2", 143)]
    k8s = attempt_of(1, "ns/run-a1", pods, record, started_at=50.0)
    assert local.words == f"{words}{blamed}"
    assert AttemptEnd(k8s.cause, tuple(k8s.blamed_nodes), k8s.exit_code) == local
    sagemaker = sagemaker_classify(reason)
    assert (sagemaker.cause, sagemaker.exit_code, sagemaker.words) == (local.cause, code, words)  # names no node

    assert local.cause is not None
    why = why_not_retried(local.cause, retry_on, 1, 1)
    expected = end_line(1, local, why, 1, 1)
    assert decide(Record(1, retry_on), k8s, "failed", "TrainJob run-a1").said == expected
    assert _slurm_line(tmp_path, code, record, retry_on).startswith(expected)  # then what SLURM does: a requeue


def test_the_line_says_why_or_which_retry() -> None:
    hang = AttemptEnd(Cause.HANG, ("n2",), 200)
    assert end_line(2, hang, "", 2, 3) == "attempt 2 ended: hang (exit 200), blamed: n2; retry 2 of 3"
    assert end_line(4, hang, "no retries left (retries: 3)", 4, 3).endswith("; no retries left (retries: 3)")
    assert end_line(1, AttemptEnd(None), "", 1, 3) == "attempt 1 ended: succeeded"

"""The SLURM batch script's retry decision and classifier, run in bash: the one retry policy (causes.py
`why_not_retried`) and the shell table rendered from it agree on every cause x retry_on x attempts-left; srun's
words (as SLURM 22.05 prints them) and the trainer's verdict.txt give the causes the SDK's rules give."""

from __future__ import annotations

import itertools
import subprocess
import sys
from pathlib import Path

import pytest
from trainctl.runs import causes
from trainctl.runs.causes import Cause
from trainctl.targets.slurm import retry_script

ROOT = Path(__file__).resolve().parents[2]
RETRYABLE = [c for c in Cause if c not in causes.NEVER_RETRIED]


def bash(script: str, env: dict[str, str] | None = None) -> str:
    done = subprocess.run(["bash", "-c", script], capture_output=True, text=True, env=env, timeout=60)
    assert done.returncode == 0, done.stderr
    return done.stdout


@pytest.mark.parametrize("retries", [0, 1, 2, 3])
def test_the_scripts_decision_is_the_policys_for_every_case(retries: int) -> None:
    """Every subset of the retryable causes as retry_on (what the spec accepts), every cause, every attempt from
    the first to two past the budget: one bash per retry_on, which prints its verdict for each (cause, attempt)."""
    cases = [(cause, attempt) for cause in Cause for attempt in range(1, retries + 3)]
    loop = " ".join(f"{cause.value}:{attempt}" for cause, attempt in cases)
    checked = 0
    for size in range(len(RETRYABLE) + 1):
        for retry_on in itertools.combinations([c.value for c in RETRYABLE], size):
            functions = "\n".join(retry_script.policy_lines(list(retry_on), retries))
            out = bash(
                f'{functions}\nfor case in {loop}; do echo "[$(why_not_retried "${{case%:*}}" "${{case#*:}}")]"; done'
            )
            expected = [f"[{causes.why_not_retried(c, list(retry_on), a, retries)}]" for c, a in cases]
            assert out.splitlines() == expected, (retry_on, retries)
            checked += len(cases)
    assert checked == 2 ** len(RETRYABLE) * len(Cause) * (retries + 2)


def test_the_policy_words() -> None:
    assert causes.why_not_retried(Cause.INVALID, [c.value for c in Cause], 1, 5) == "never retried"
    assert causes.why_not_retried(Cause.APPLICATION_ERROR, ["hang"], 1, 2) == "not in retry_on"
    assert causes.why_not_retried(Cause.HANG, ["hang"], 3, 2) == "no retries left (retries: 2)"
    assert causes.why_not_retried(Cause.HANG, ["hang"], 2, 2) == ""


def _task(node: str, task: str, what: str) -> str:
    return f"srun: error: {node}: {task}: {what}"


def classify(tmp_path: Path, rc: int, lines: list[str], verdict: str | None) -> tuple[str, list[str], str]:
    """The rendered `classify` on a log whose part after `offset` is `lines`, with verdict.txt (or none)."""
    log, found = tmp_path / "job.out", tmp_path / "verdict.txt"
    log.write_text("an earlier attempt's lines\n" + _task("n9", "task 0", "Exited with exit code 2") + "\n")
    offset = log.stat().st_size
    with log.open("a") as fh:
        fh.write("".join(f"{line}\n" for line in lines))
    found.unlink(missing_ok=True)
    if verdict is not None:
        found.write_text(verdict)
    functions = "\n".join(retry_script.function_lines(["hang"], 1))
    script = f'set -euo pipefail\nlog={log} verdict={found} offset={offset}\n{functions}\nclassify {rc}\necho "$cause|$blamed|$words"'
    cause, blamed, words = bash(script, env={"PATH": "/usr/bin:/bin"}).rstrip("\n").split("|", 2)
    return cause, [n for n in blamed.split(",") if n], words


def _verdict(record: dict[str, object]) -> str:
    sys.path.insert(0, str(ROOT / "trainer_image"))
    try:
        from trainer import records
    finally:
        sys.path.pop(0)
    return records.verdict_text(record)


HANG = {"kind": "hang", "suspects": [{"node": "n2", "rank": 1}, {"node": "n2", "rank": 2}, {"node": "n3", "rank": 3}]}
SLOW = {"kind": "slow_node", "suspects": [{"node": "n3", "rank": 2}]}
ERROR = {"kind": "error", "rank": 1, "node": "n2"}


@pytest.mark.parametrize(
    ("rc", "lines", "record", "cause", "blamed"),
    [
        (0, [], None, "", []),
        # the srun 143 bug: n1 failed, srun's --kill-on-bad-exit SIGTERMed n2, whose trainer checkpointed (143)
        (143, [_task("n1", "task 0", "Exited with exit code 1"), _task("n2", "task 1", "Exited with exit code 143")],
         None, "application_error", []),
        (143, [_task("n2", "task 1", "Exited with exit code 2"), _task("n1", "task 0", "Exited with exit code 143")],
         None, "invalid", []),
        # a real preemption: every task checkpointed on SLURM's signal
        (143, [_task("n1", "task 0", "Exited with exit code 143"), _task("n2", "task 1", "Exited with exit code 143")],
         None, "preempted", []),
        (143, [], None, "preempted", []),
        # the first task srun saw end checkpointed (143); srun then ended the other itself: still a preemption
        (143, [_task("n1", "task 0", "Exited with exit code 143"), _task("n2", "task 1", "Terminated")],
         None, "preempted", []),
        # the trainer's verdict names the node even when srun's highest code is a peer's 143
        (200, [_task("n1", "task 0", "Exited with exit code 200"), _task("n2", "task 1", "Killed")],
         HANG, "hang", ["n2", "n3"]),
        (201, [], SLOW, "slow_node", ["n3"]),
        (1, [_task("n2", "task 1", "Exited with exit code 1")], ERROR, "application_error", []),
        (1, ["srun: error: Node failure on n3", _task("n3", "task 2", "Killed")], None, "node_lost", ["n3"]),
        (137, ["slurmstepd: error: Detected 1 oom_kill event in StepId=7.0. Some of your processes may have been "
               "killed by the cgroup out-of-memory handler.", _task("n2", "task 1", "Out Of Memory")],
         None, "out_of_memory", ["n2"]),
        (9, [_task("n1", "tasks 0-1", "Segmentation fault")], None, "application_error", []),
        (200, [_task("n1", "task 0", "Exited with exit code 200")], None, "hang", []),
        (2, [], None, "invalid", []),
        # no pyxis: srun stops on its option before any task starts (status.not_started names it)
        (255, ["srun: unrecognized option '--container-image=ghcr.io#org/trainer:1'",
               'Try "srun --help" for more information'], None, "invalid", []),
        (1, [], None, "application_error", []),
    ],
)  # fmt: skip
def test_the_scripts_causes(tmp_path, rc, lines, record, cause, blamed):
    found, nodes, words = classify(tmp_path, rc, lines, _verdict(record) if record else None)
    assert (found, nodes) == (cause, blamed)
    assert bool(words) == bool(cause)
    if record is not None and record["kind"] in causes.TRAINER_KINDS:  # the SDK's rules read failure.json alike
        assert (causes.from_trainer(None, record), causes.blamed_nodes(record)) == (Cause(cause), blamed)


def test_the_exit_code_table_is_the_trainers() -> None:
    functions = "\n".join(retry_script.function_lines([], 0))
    codes = [0, 1, 2, 3, 137, 143, 200, 201, 255]
    out = bash(f"{functions}\nfor code in {' '.join(map(str, codes))}; do exit_cause $code; done").split()
    assert out == [(causes.TRAINER_EXITS.get(c) or Cause.APPLICATION_ERROR).value for c in codes]


def test_the_trainer_writes_verdict_txt_with_every_failure_record(tmp_path: Path) -> None:
    """records.write_failure (the trainer's and the launcher's one writer) leaves verdict.txt beside failure.json;
    a record that does not stand (replace=False, one already there) changes neither."""
    sys.path.insert(0, str(ROOT / "trainer_image"))
    try:
        from trainer import records
    finally:
        sys.path.pop(0)
    assert records.write_failure(tmp_path, HANG)
    assert (tmp_path / "verdict.txt").read_text() == "kind=hang\nnodes=n2,n3\n"
    assert not records.write_failure(tmp_path, SLOW, replace=False)
    assert (tmp_path / "verdict.txt").read_text() == "kind=hang\nnodes=n2,n3\n"
    assert classify(tmp_path, 200, [], (tmp_path / "verdict.txt").read_text())[:2] == ("hang", ["n2", "n3"])


@pytest.mark.parametrize("container", ["none", "pyxis", "apptainer", "podman"])
def test_no_line_of_a_retrying_script_runs_python_on_the_batch_host(container: str) -> None:
    """Everything but the srun command (which runs the job's own Python, on the nodes, in the runtime) is bash
    and SLURM's commands, in every runtime."""
    from trainctl import Job
    from trainctl.targets.slurm.render import script

    job = Job.parse({"name": "r", "trainer": {"model": "digits"}, "data": {"train": "/d/t.jsonl"}, "retries": 2,
                     "image": "ghcr.io/trainctl/trainer:0.1.0",
                     "slurm": {"container": container, "preemption": True, "workdir": "/shared/w"}})  # fmt: skip
    text, _ = script(job)
    host = text[: text.index("\nsrun ")] + text[text.index(" || rc=$?\n") :]
    assert "why_not_retried" in host and "scontrol requeue" in host
    assert not [line for line in host.splitlines() if "python" in line.lower()], host

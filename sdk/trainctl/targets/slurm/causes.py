"""Why a SLURM attempt ended: srun's words in the job's log, the job's state, and the trainer's record.

Pure and standard library only: the batch script runs this file (with trainctl/causes.py and
retry_program.py) under the node's `python3` to decide a retry, and `trainctl status` reads the verdicts
it wrote. The words are srun's and slurmstepd's, as this project's SLURM 22.05 cluster prints them into
the job's output (tests/slurm/test_causes_cluster.py runs each case on it):

    srun: error: n2: task 1: Exited with exit code 1      (one line per node and exit status)
    srun: error: n2: tasks 0-1: Killed                     (a signal: Killed, Terminated, ...)
    srun: error: Node failure on n2                        (slurmd stopped answering)
    slurmstepd: error: Detected 1 oom_kill event in StepId=12.0. Some of your processes may have been killed ...

The srun 143 bug this fixes: with `--kill-on-bad-exit` srun SIGTERMs every other task once one fails;
the trainer then checkpoints on that SIGTERM and exits 143, and srun exits with the highest code, 143
over a 1 or a 2. The batch script used to read that as a preemption. A preemption signals every task,
so every task ends 143, or the first one srun reports does and srun ends the rest itself ("Terminated");
a first task that ended otherwise is the real cause.
"""

from __future__ import annotations

import re
from typing import Any, NamedTuple

from ...causes import EXIT_BAD_INPUT, EXIT_PREEMPTED, Cause, blamed_nodes, from_trainer

_TASK = re.compile(r"^srun: error: (\S+): tasks? ([0-9,\-\[\]]+): (.+?)\s*$")
_EXITED = re.compile(r"Exited with exit code (\d+)")
_NODE_FAILURE = re.compile(r"^srun: error: Node failure on (\S+)")
_OOM = re.compile(r"(oom_kill event|out-of-memory handler|Out Of Memory)", re.IGNORECASE)


class TaskEnd(NamedTuple):
    """One node's task(s) as srun reported their end: the exit code, or the signal's name."""

    node: str
    code: int | None
    signal: str | None


def task_ends(lines: list[str]) -> list[TaskEnd]:
    """srun's per-task verdicts, in the order it printed them (the first failure comes first)."""
    ends = []
    for line in lines:
        match = _TASK.match(line.strip())
        if not match:
            continue
        node, what = match.group(1), match.group(3)
        exited = _EXITED.search(what)
        ends.append(TaskEnd(node, int(exited.group(1)), None) if exited else TaskEnd(node, None, what))
    return ends


def lost_nodes(lines: list[str]) -> list[str]:
    return list(dict.fromkeys(m.group(1) for m in (_NODE_FAILURE.match(ln.strip()) for ln in lines) if m))


def classify(
    rc: int, lines: list[str], record: dict[str, Any] | None, job_state: str = ""
) -> tuple[Cause | None, list[str], str]:
    """(cause, blamed nodes, the words it came from) of one attempt: `rc` is srun's exit code, `lines` the
    attempt's part of the job's log, `record` this attempt's failure.json, `job_state` SLURM's (when the
    script did not live to say: NODE_FAIL, OUT_OF_MEMORY). Cause None: it succeeded."""
    said = from_trainer(None, record)
    if said is not None:  # the trainer's verdict names the node; srun's 143s are its peers being stopped
        return said, blamed_nodes(record), f"failure.json: {record.get('kind') if record else ''}"
    lost = lost_nodes(lines)
    if lost or job_state.startswith("NODE_FAIL"):
        return Cause.NODE_LOST, lost, "srun: node failure" if lost else f"job state {job_state}"
    ends = task_ends(lines)
    oom = [ln for ln in lines if _OOM.search(ln)]
    if oom or job_state.startswith("OUT_OF_MEMORY"):
        nodes = [e.node for e in ends if e.signal and _OOM.search(e.signal)]
        return Cause.OUT_OF_MEMORY, nodes, (oom[0].strip() if oom else f"job state {job_state}")
    if rc == 0:
        return None, [], ""
    # srun reports the first task to fail first; the tasks it then ends itself (--kill-on-bad-exit) follow,
    # as "Terminated" or a 143 of their own: only the first one is the attempt's cause
    first = next((e for e in ends if e.code != 0), None)
    if first is not None and first.code != EXIT_PREEMPTED:
        words = f"srun: {first.node}: " + (f"exit {first.code}" if first.signal is None else first.signal)
        if first.code == EXIT_BAD_INPUT:
            return Cause.INVALID, [], words
        if first.code is not None and first.code != 1:
            cause = from_trainer(first.code, None)
            if cause is not None:
                return cause, [], words
        return Cause.APPLICATION_ERROR, [], words
    if rc == EXIT_PREEMPTED:
        return Cause.PREEMPTED, [], "every task ended 143: the trainer checkpointed on SLURM's signal"
    return from_trainer(rc, None) or Cause.APPLICATION_ERROR, [], f"srun exit {rc}"

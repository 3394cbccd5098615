"""Why an attempt ended, and whether `retry_on` retries it: the trainer's part of the verdict.

Every target classifies an attempt's end into one `Cause` from two sources: the trainer's own words
(its exit code, trainer/exit_codes.py, and the failure.json it wrote, trainer/records.py) and the
engine's words (a SLURM job state or srun's task lines, a pod's container status, a SageMaker
FailureReason). This module holds the first part and the rule that joins them; each target's
`causes.py` holds the second, one pure function each, table-tested in tests/sdk/test_causes.py.

One retry decision for every target: `why_not_retried`. The local supervisor and the Kubernetes driver
call it; the SLURM batch script, which runs with no Python on the host, carries it as a shell table rendered
from it (targets/slurm/retry_script.py `policy_lines`, table-tested against it in tests/sdk/test_retry_shell.py),
and so do the trainer's exit codes and verdicts (`TRAINER_EXITS`, `TRAINER_KINDS`).

The anchor for `retry_on` is SkyPilot's managed-job recovery (sky/jobs/controller.py hands its
StrategyExecutor `max_restarts_on_errors` and `recover_on_exit_codes`; docs/source/examples/managed-jobs.rst:
preemptions are always recovered, user-code errors only `max_restarts_on_errors` times, and the
listed exit codes always). Here the list names causes, not codes, and `retries` bounds them all.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from typing import Any

# trainer/exit_codes.py: the trainer owns these numbers; tests/sdk/test_causes.py checks the copy.
EXIT_BAD_INPUT = 2
EXIT_PREEMPTED = 143
EXIT_KILLED = 137
EXIT_HANG = 200
EXIT_SLOW_NODE = 201


class Cause(str, Enum):
    """Why an attempt ended (DESIGN.md "A run over days")."""

    INVALID = "invalid"
    PREEMPTED = "preempted"
    HANG = "hang"
    NODE_LOST = "node_lost"
    SLOW_NODE = "slow_node"
    OUT_OF_MEMORY = "out_of_memory"
    APPLICATION_ERROR = "application_error"


DEFAULT_RETRY_ON: tuple[Cause, ...] = (
    Cause.PREEMPTED,
    Cause.HANG,
    Cause.NODE_LOST,
    Cause.SLOW_NODE,
    Cause.OUT_OF_MEMORY,
    Cause.APPLICATION_ERROR,
)
"""Every cause but invalid input: what `retries: N` did before causes had names. Use
`retry_on: [preempted, hang, node_lost, slow_node]` for SkyPilot's default (no retry of the program's
own errors)."""

NEVER_RETRIED = (Cause.INVALID,)

TRAINER_EXITS: dict[int, Cause] = {
    EXIT_BAD_INPUT: Cause.INVALID,
    EXIT_HANG: Cause.HANG,
    EXIT_SLOW_NODE: Cause.SLOW_NODE,
    EXIT_PREEMPTED: Cause.PREEMPTED,
}
"""The causes the trainer's own exit codes name; any other code names none (the engine's words may)."""

TRAINER_KINDS: dict[str, Cause] = {"hang": Cause.HANG, "slow_node": Cause.SLOW_NODE}
"""The causes a failure record's `kind` names (failure.json, and verdict.txt for the SLURM batch script)."""


def failure_of_attempt(record: dict[str, Any] | None, started_at: float | None) -> dict[str, Any] | None:
    """The failure.json verdict if this attempt wrote it (the file stays in the output folder across
    attempts: one older than the attempt's start is an earlier attempt's)."""
    if not isinstance(record, dict):
        return None
    written = record.get("time")
    if started_at is not None and isinstance(written, (int, float)) and written < started_at - 1.0:
        return None
    return record


def blamed_nodes(record: dict[str, Any] | None) -> list[str]:
    """The nodes a failure record blames: its suspects' nodes, in order, each once."""
    if not isinstance(record, dict):
        return []
    nodes = [s.get("node") for s in record.get("suspects") or [] if isinstance(s, dict)]
    return list(dict.fromkeys(n for n in nodes if isinstance(n, str) and n))


def from_trainer(exit_code: int | None, record: dict[str, Any] | None) -> Cause | None:
    """The cause the trainer's own words give, or None where they say nothing specific (exit 1: the
    engine's words may know better, a lost node, the OOM killer)."""
    kind = record.get("kind") if isinstance(record, dict) else None
    if exit_code == EXIT_BAD_INPUT:
        return Cause.INVALID
    if isinstance(kind, str) and kind in TRAINER_KINDS:
        return TRAINER_KINDS[kind]
    return TRAINER_EXITS.get(exit_code) if exit_code is not None else None


def why_not_retried(cause: Cause, retry_on: list[str] | tuple[Cause, ...], attempt: int, retries: int) -> str:
    """The one retry decision: '' when attempt number `attempt` (from 1), ended by `cause`, gets another;
    else why not, in the words every target logs. Never for invalid input, only for the causes `retry_on`
    lists, and at most `retries + 1` attempts in all. It depends on `attempt` only through
    `attempt > retries`, which is what lets the SLURM script carry it as a table (`policy_lines`)."""
    if cause in NEVER_RETRIED:
        return "never retried"
    if cause.value not in {Cause(c).value for c in retry_on}:
        return "not in retry_on"
    if attempt > retries:
        return f"no retries left (retries: {retries})"
    return ""


def retried(cause: Cause, retry_on: list[str] | tuple[Cause, ...], attempt: int, retries: int) -> bool:
    """Whether attempt number `attempt` (from 1), ended by `cause`, gets another (`why_not_retried`)."""
    return not why_not_retried(cause, retry_on, attempt, retries)


def describe(cause: Cause, exit_code: int | None, nodes: list[str] | tuple[str, ...]) -> str:
    """One line for logs and status: `hang (exit 200), blamed: n2`."""
    code = f" (exit {exit_code})" if exit_code is not None else ""
    blamed = f", blamed: {', '.join(nodes)}" if nodes else ""
    return f"{cause.value}{code}{blamed}"


@dataclass(frozen=True)
class AttemptEnd:
    """How one attempt ended, as every target's `classify` tells it from its engine's words and the trainer's: the
    cause (None: nothing failed), the nodes it blames, and the exit code that told."""

    cause: Cause | None
    blamed: tuple[str, ...] = ()
    exit_code: int | None = None

    @property
    def words(self) -> str:
        """`hang (exit 200), blamed: n2`, or `succeeded`."""
        return describe(self.cause, self.exit_code, self.blamed) if self.cause else "succeeded"


def end_line(number: int, end: AttemptEnd, why_not: str, used: int, retries: int) -> str:
    """The line every target logs when attempt `number` ended: `attempt 2 ended: hang (exit 200), blamed: n2;
    retry 2 of 3` or `...; not in retry_on`. `why_not` is `why_not_retried`'s answer; `used` counts the retries
    spent, this one included (SLURM's requeues for a preemption spend none). The SLURM script says the same in
    bash (targets/slurm/retry_script.py), and may add what it does next."""
    head = f"attempt {number} ended: {end.words}"
    if end.cause is None:
        return head
    return f"{head}; {why_not}" if why_not else f"{head}; retry {used} of {retries}"

"""Why a SageMaker training job ended: its FailureReason and SecondaryStatus joined with the trainer's words.

SageMaker prefixes FailureReason with the side at fault (CreateTrainingJob/DescribeTrainingJob API reference:
`ClientError`, `AlgorithmError`, `InternalServerError`, `CapacityError`), and puts the container's
/opt/ml/output/failure text after `AlgorithmError: `; trainer-launch writes that file with the exit code in its
words (trainer/launch.py `_describe`: "training stopped on bad input (exit 2)", "a hang (exit 200)", "a slow
node was excluded ... (exit 201)", "training failed with exit code N"), or, when the program failed, its first
failing rank's record as text (trainer/first_failure.py `text`: "rank 1 on algo-2 failed (exit 1): RuntimeError:
boom", then "last lines of rank 1:" and the lines), which `failure_of` reads back. Managed spot training ends an
interrupted job as SecondaryStatus `Interrupted` or `MaxWaitTimeExceeded`. No node is blamed: every
SageMaker retry (RetryStrategy, spot restarts) gets new instances, so there is nothing to leave out.
"""

from __future__ import annotations

import re

from ...runs.causes import AttemptEnd, Cause, from_trainer
from ...runs.state import Attempt, Failure, RunState

_EXIT = re.compile(r"\(exit (\d+)\)|exit code:? (\d+)|ExitCode:? (\d+)", re.IGNORECASE)


_HEADLINE = re.compile(r"^rank (\d+) on (\S+) failed \((?:exit (\d+)|signal (\w+))\)(?:: (.*))?$")
_TYPED = re.compile(r"^([A-Za-z_][\w.]*): (.*)$", re.DOTALL)
_TAIL = re.compile(r"^last lines of rank \d+:$")


def failure_of(failure_reason: str) -> Failure | None:
    """The first failing rank's record from FailureReason (`AlgorithmError: ` and the launcher's text), or None
    where the failure file said something else."""
    kind, _, rest = failure_reason.partition(": ")
    lines = rest.splitlines() if kind == "AlgorithmError" else []
    match = _HEADLINE.match(lines[0]) if lines else None
    if match is None:
        return None
    rank, node, code, signal, said = match.groups()
    typed = _TYPED.match(said or "")
    exception, message = typed.groups() if typed else (None, said)
    tail = lines[2:] if len(lines) > 1 and _TAIL.match(lines[1]) else []
    return Failure(kind="error", source="launcher", rank=int(rank), node=node, exit_code=int(code) if code else None,
                   signal=signal, exception=exception, message=message, log_tail=tail)  # fmt: skip


def exit_code_of(failure_reason: str) -> int | None:
    match = _EXIT.search(failure_reason)
    return int(next(g for g in match.groups() if g)) if match else None


def classify(failure_reason: str, secondary_status: str = "") -> AttemptEnd:
    """How a failed or stopped job ended (cause None: SageMaker gave no reason to classify). SageMaker names
    no node of its own: the hosts are algo-1..N, and its FailureReason blames none."""
    return AttemptEnd(_cause(failure_reason, secondary_status), (), exit_code_of(failure_reason))


def _cause(failure_reason: str, secondary_status: str) -> Cause | None:
    if secondary_status in ("Interrupted", "MaxWaitTimeExceeded"):
        return Cause.PREEMPTED
    kind, _, rest = failure_reason.partition(":")
    if kind.strip() in ("InternalServerError", "CapacityError"):
        return Cause.NODE_LOST  # SageMaker's own side: its instances, not the job
    if kind.strip() == "ClientError":
        return Cause.INVALID  # the request itself: a role, an image, a channel SageMaker cannot use
    code = exit_code_of(rest)
    said = from_trainer(code, {"kind": "hang"} if "a hang" in rest else None)
    if said is not None:
        return said
    if re.search(r"out of memory|OutOfMemory|more memory", rest, re.IGNORECASE):
        return Cause.OUT_OF_MEMORY
    return Cause.APPLICATION_ERROR if failure_reason else None


def attempts(job_name: str, state: RunState, failure_reason: str, secondary_status: str = "",
             exit_code: int | None = None) -> list[Attempt]:  # fmt: skip
    """The training job as its one attempt trainctl can see (SageMaker's own retries of it are not listed
    apart), with its cause once it failed."""
    if not state.finished:
        return []
    cause = classify(failure_reason, secondary_status).cause if state is RunState.FAILED else None
    code = exit_code if exit_code is not None else exit_code_of(failure_reason)
    return [Attempt(number=1, engine_id=job_name, state=state, cause=cause, exit_code=code,
                    reason=failure_reason or None)]  # fmt: skip

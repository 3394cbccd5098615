"""Why a SageMaker training job ended: its FailureReason and SecondaryStatus joined with the trainer's words.

SageMaker prefixes FailureReason with the side at fault (CreateTrainingJob/DescribeTrainingJob API reference:
`ClientError`, `AlgorithmError`, `InternalServerError`, `CapacityError`), and puts the container's
/opt/ml/output/failure text after `AlgorithmError: `; trainer-launch writes that file with the exit code in its
words (trainer/launch.py `_describe`: "training stopped on bad input (exit 2)", "a hang (exit 200)", "a slow
node was excluded ... (exit 201)", "training failed with exit code N"). Managed spot training ends an
interrupted job as SecondaryStatus `Interrupted` or `MaxWaitTimeExceeded`. No node is blamed: every
SageMaker retry (RetryStrategy, spot restarts) gets new instances, so there is nothing to leave out.
"""

from __future__ import annotations

import re

from ...causes import Cause, from_trainer
from ...run_state import Attempt, RunState

_EXIT = re.compile(r"\(exit (\d+)\)|exit code:? (\d+)|ExitCode:? (\d+)", re.IGNORECASE)


def exit_code_of(failure_reason: str) -> int | None:
    match = _EXIT.search(failure_reason)
    return int(next(g for g in match.groups() if g)) if match else None


def classify(failure_reason: str, secondary_status: str = "") -> Cause | None:
    """The cause of a failed or stopped job (None: SageMaker gave no reason to classify)."""
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
    cause = classify(failure_reason, secondary_status) if state is RunState.FAILED else None
    code = exit_code if exit_code is not None else exit_code_of(failure_reason)
    return [Attempt(number=1, engine_id=job_name, state=state, cause=cause, exit_code=code,
                    reason=failure_reason or None)]  # fmt: skip

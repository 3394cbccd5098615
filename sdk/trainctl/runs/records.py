"""What the trainer and the launcher leave in a run's output folder about how it went wrong, as the
SDK reads it (docs/contracts.md section 2; the trainer writes them, trainer/records.py).

    failure.json     the verdict that ended an attempt: kind `hang` or `slow_node`, the step, and the
                     suspects (node, rank, heartbeat age, why); or kind `error`: the program's first failing
                     rank, its node, exception, message and last lines (trainer/first_failure.py)
    slow_nodes.json  every node the straggler check flagged, with its rank and ratio

Data only: each target's engine reads the files where it can reach them and hands the parsed JSON
here, so `trainctl status` shows them the same way on every target (`slow_nodes`, `failure`).
"""

from __future__ import annotations

import time
from typing import Any

from pydantic import ValidationError

from .state import Attempt, Failure, RunState, RunStatus, SlowNode

FAILURE = "failure.json"
SLOW_NODES = "slow_nodes.json"
SUMMARY = "summary.json"  # written by rank 0 once the last step is done (docs/contracts.md)


def slow_nodes(data: dict[str, Any] | None) -> list[SlowNode]:
    """The flagged nodes of a slow_nodes.json, slowest first (an entry this trainctl cannot read is left out)."""
    if not isinstance(data, dict) or not isinstance(data.get("nodes"), list):
        return []
    nodes = []
    for entry in data["nodes"]:
        try:
            nodes.append(SlowNode.model_validate(entry))
        except ValidationError:
            continue
    return sorted(nodes, key=lambda n: -(n.ratio or 0.0))


def failure(data: dict[str, Any] | None) -> Failure | None:
    """The failure.json's verdict, or None where there is none this trainctl can read."""
    try:
        return Failure.model_validate(data) if isinstance(data, dict) else None
    except ValidationError:
        return None


def of_last_attempt(status: RunStatus) -> RunStatus:
    """The status without a failure.json an earlier attempt left: the output folder outlives attempts, so a run
    that succeeded on its retry, or whose retry is running, still has the first attempt's verdict there (the
    attempts list keeps each attempt's cause)."""
    failure = status.failure
    if failure is None:
        return status
    starts = [a.started_at for a in status.attempts if a.started_at is not None]
    earlier = failure.time is not None and bool(starts) and failure.time < max(starts)
    if status.state is RunState.SUCCEEDED or earlier:
        return status.model_copy(update={"failure": None})
    return status


def explained(status: RunStatus) -> RunStatus:
    """A failed run's reason and log tail from its program's error record, where one names the first failing
    rank: `rank 1 on n1 failed (exit 1): RuntimeError: boom` says more than the engine's `exit code 1`."""
    failure = status.failure
    if status.state is not RunState.FAILED or failure is None or failure.kind != "error":
        return status
    return status.model_copy(update={"reason": failure_line(failure), "log_tail": failure.log_tail or status.log_tail})


def slow_node_line(node: SlowNode) -> str:
    """`n2 (rank 1): 4.83x the median compute time (steps 21-60)`, for the text status."""
    first, last = node.first_step, node.last_step
    steps = (
        "" if first is None or last is None else f" (at step {first})" if first == last else f" (steps {first}-{last})"
    )
    return f"{node.node} (rank {node.rank}): {node.ratio}x the median compute time{steps}"


def tail_heading(record: Failure) -> str:
    """`last lines of rank 1`; of an error before any rank ran, whose words they are (the launcher's, the runtime's)."""
    return f"last lines of rank {record.rank}" if record.rank is not None else f"last lines of the {record.source}"


def failure_line(record: Failure) -> str:
    """`hang at step 57: suspect n2 rank 1 (no heartbeat for 11 s ...)`, for the text status; of an error,
    `rank 1 on n1 failed (exit 1): RuntimeError: boom` (the launcher's own words, first_failure.headline)."""
    if record.kind == "error" and record.source == "runtime":
        # the container runtime could not start the container (a Kubernetes pod's start error)
        return f"the container could not start on {record.node} (exit {record.exit_code}): {record.message}"
    if record.kind == "error" and record.rank is None and record.source == "launcher":
        # before any worker started (the data could not be staged): the launcher's own words
        return f"the launcher on {record.node} failed (exit {record.exit_code}): {record.message or record.exception}"
    if record.kind == "error":
        how = f"signal {record.signal}" if record.signal else f"exit {record.exit_code}"
        said = "".join(
            f": {part.splitlines()[0]}" for part in (record.exception, record.message) if part and part.strip()
        )
        return f"rank {record.rank} on {record.node} failed ({how}){said}"
    step = f" at step {record.step}" if record.step is not None else ""
    named = "; ".join(f"suspect {s.node} rank {s.rank} ({s.why})" for s in record.suspects)
    return f"{record.kind}{step}: {named or 'no suspect named'}"


def attempt_line(attempt: Attempt) -> str:
    """`attempt 2 [12] on n[1,3]: succeeded, exit 0, 04:47:51-04:48:32 UTC, resumed from step 8`."""
    head = f"attempt {attempt.number}" + (f" [{attempt.engine_id}]" if attempt.engine_id else "")
    head += f" on {attempt.nodes}" if attempt.nodes else ""
    parts = []
    if attempt.ended_at is None:
        parts.append("running")
    elif attempt.cause is not None:
        parts.append(attempt.cause.value)
    elif attempt.state is not None:
        parts.append(attempt.state.value)
    if attempt.exit_code is not None:
        parts.append(f"exit {attempt.exit_code}")
    if attempt.blamed_nodes:
        parts.append(f"blamed {' '.join(attempt.blamed_nodes)}")
    when = [time.strftime("%H:%M:%S", time.gmtime(t)) for t in (attempt.started_at, attempt.ended_at) if t is not None]
    if when:
        parts.append("-".join(when) + " UTC")
    if attempt.resumed_from_step is not None:
        parts.append(f"resumed from step {attempt.resumed_from_step}")
    if attempt.reason:
        parts.append(attempt.reason)
    return f"{head}: {', '.join(parts)}"

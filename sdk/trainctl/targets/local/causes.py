"""Why a local attempt ended: the runner's own words (the exit code, a signal, its own stop) joined with
the trainer's (exit code, failure.json). Pure; the runner calls it after each attempt."""

from __future__ import annotations

from typing import Any

from ...runs.causes import AttemptEnd, Cause, blamed_nodes, from_trainer


def classify(exit_code: int | None, record: dict[str, Any] | None) -> AttemptEnd:
    """One failed attempt's end. Locally there is no node to lose and no engine that names an OOM kill: a
    signal that is not the trainer's own preemption (SIGKILL, SIGSEGV) is the program's error. The nodes
    blamed are the trainer's record's (a hang's suspects)."""
    said = from_trainer(exit_code, record)
    if said is None and exit_code is not None and exit_code < 0 and -exit_code == 15:
        said = Cause.PREEMPTED  # SIGTERM reached the launcher itself
    return AttemptEnd(said or Cause.APPLICATION_ERROR, tuple(blamed_nodes(record)), exit_code)

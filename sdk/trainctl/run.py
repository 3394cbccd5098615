"""A submitted run on any target: one handle with status, logs, wait and cancel."""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

from .errors import EngineError, TrainctlError


class RunState(str, Enum):
    """trainctl's states; each target maps its engine's states onto these."""

    QUEUED = "queued"
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    CANCELLED = "cancelled"
    UNKNOWN = "unknown"

    @property
    def finished(self) -> bool:
        return self in (RunState.SUCCEEDED, RunState.FAILED, RunState.CANCELLED)


@dataclass(frozen=True)
class RunStatus:
    """A state plus the engine's own words for it."""

    state: RunState
    native_state: str = ""
    reason: str = ""
    details: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {
            "state": self.state.value,
            "native_state": self.native_state,
            "reason": self.reason,
            "details": self.details,
        }


def split_run_id(run_id: str) -> tuple[str, str]:
    """`slurm:123` -> ("slurm", "123"), with a clear error for anything else."""
    from .job import TARGETS

    target, sep, native = run_id.partition(":")
    if not sep or target not in TARGETS or not native:
        raise TrainctlError(
            f"run id {run_id!r}: expected <target>:<id> with target one of {', '.join(TARGETS)} "
            "(e.g. local:20261121-120000-digits-1a2b, slurm:42, kubernetes:default/digits, sagemaker:digits-2026...)"
        )
    return target, native


@dataclass
class Run:
    """Handle to a run; `meta` holds what its target needs later (log path, context, region...)."""

    target: str
    native_id: str
    job_name: str = ""
    meta: dict[str, Any] = field(default_factory=dict)
    created_at: float = field(default_factory=time.time)

    @property
    def id(self) -> str:
        return f"{self.target}:{self.native_id}"

    @classmethod
    def from_id(cls, run_id: str) -> Run:
        """The recorded run with this id, or a bare handle for one submitted elsewhere."""
        from .registry import Registry

        target, native = split_run_id(run_id)
        found = Registry().get(run_id)
        return found if found is not None else cls(target=target, native_id=native)

    def _target(self) -> Any:
        from .targets import get_target

        return get_target(self.target)

    def status(self) -> RunStatus:
        status: RunStatus = self._target().status(self)
        from .registry import Registry

        Registry().update_state(self.id, status.state)
        return status

    def logs(self, follow: bool = False) -> Iterator[str]:
        """Log lines (without newlines); with follow, until the run ends."""
        yield from self._target().logs(self, follow=follow)

    def cancel(self) -> None:
        self._target().cancel(self)

    def wait(self, timeout: float | None = None, poll: float = 2.0) -> RunStatus:
        """Block until the run finishes; raise EngineError on timeout."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            status = self.status()
            if status.state.finished:
                return status
            if deadline is not None and time.monotonic() >= deadline:
                raise EngineError(f"{self.id} still {status.state.value} after {timeout:g}s")
            time.sleep(poll)

    def __repr__(self) -> str:
        return f"Run(id={self.id!r}, job={self.job_name!r})"

"""What a run is, as data: its states, its status, its id. A leaf: every layer may import it.

Engines return a `RunRef` (the target, the engine's own id and what the target needs later);
`trainctl.run.Run` is the same data with the methods that act on it (status, logs, wait, cancel).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

from .errors import TrainctlError
from .targets.table import NAMES


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
    target, sep, native = run_id.partition(":")
    if not sep or target not in NAMES or not native:
        raise TrainctlError(
            f"run id {run_id!r}: expected <target>:<id> with target one of {', '.join(NAMES)} "
            "(e.g. local:20261121-120000-digits-1a2b, slurm:42, kubernetes:default/digits, sagemaker:digits-2026...)"
        )
    return target, native


@dataclass(eq=False)
class RunRef:
    """A run on an engine; `meta` holds what its target needs later (log path, context, region...)."""

    target: str
    native_id: str
    job_name: str = ""
    meta: dict[str, Any] = field(default_factory=dict)
    created_at: float = field(default_factory=time.time)

    @property
    def id(self) -> str:
        return f"{self.target}:{self.native_id}"

    def _key(self) -> tuple[Any, ...]:
        return (self.target, self.native_id, self.job_name, self.meta, self.created_at)

    def __eq__(self, other: object) -> bool:
        """Equal data is the same run, whether held as a bare `RunRef` or a `Run` handle."""
        return isinstance(other, RunRef) and self._key() == other._key()

    __hash__ = None  # type: ignore[assignment]  # mutable, like the dataclass it replaces

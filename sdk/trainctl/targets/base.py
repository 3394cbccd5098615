"""What every target module provides, and the rendered artifact they return."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from ..job import Job
    from ..run import Run, RunStatus


@dataclass(frozen=True)
class Rendered:
    """A target's native artifact: `native` is the object (dict, argv...), `text` its exact bytes."""

    target: str
    text: str
    native: Any
    filename: str
    notes: tuple[str, ...] = field(default_factory=tuple)

    def __str__(self) -> str:
        return self.text


def json_text(obj: Any) -> str:
    """Deterministic JSON for rendered artifacts: sorted keys, two-space indent, trailing newline."""
    return json.dumps(obj, indent=2, sort_keys=True, ensure_ascii=False) + "\n"


class TargetModule(Protocol):
    """The small interface each `targets/<name>.py` module satisfies."""

    def render(self, job: Job) -> Rendered: ...

    def submit(self, job: Job, **options: Any) -> Run: ...

    def status(self, run: Run) -> RunStatus: ...

    def logs(self, run: Run, follow: bool = False) -> Iterator[str]: ...

    def cancel(self, run: Run) -> None: ...

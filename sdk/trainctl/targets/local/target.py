"""The local target: the launcher's argv and environment, run here as a detached process group."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from ...run_state import RunRef, RunStatus
from ...spec import JobSpec
from ..base import NoOptions, Rendered, Target
from .render import render
from .section import LocalSection


class LocalTarget(Target[NoOptions]):
    name = "local"
    section = LocalSection
    options = NoOptions

    def render(self, job: JobSpec) -> Rendered:
        return render(job)

    def schedule(self, job: JobSpec, options: NoOptions) -> RunRef:
        from . import engine  # the engine loads on first use: render never pays for it

        return engine.submit(job)

    def status(self, run: RunRef) -> RunStatus:
        from . import engine

        return engine.status(run)

    def logs(self, run: RunRef, follow: bool = False) -> Iterator[str]:
        from . import engine

        return engine.logs(run, follow=follow)

    def cancel(self, run: RunRef) -> None:
        from . import engine

        engine.cancel(run)

    def summary(self, run: RunRef) -> dict[str, Any] | None:
        from . import engine

        return engine.summary(run)


TARGET = LocalTarget()

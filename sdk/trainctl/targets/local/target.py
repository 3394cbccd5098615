"""The local target: the launcher's argv and environment, run here as a detached process group."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
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

    def place_checkpoint(self, job: JobSpec, files: Path, subdir: str) -> str:
        from . import engine

        return engine.place_checkpoint(job, files, subdir)

    def summary(self, run: RunRef) -> dict[str, Any] | None:
        from . import engine

        return engine.summary(run)


TARGET = LocalTarget()

"""The local target: the launcher's argv and environment, run here as a detached process group."""

from __future__ import annotations

from types import ModuleType

from ...run_state import RunRef
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

    def engine(self) -> ModuleType:
        from . import engine

        return engine

    def schedule(self, job: JobSpec, options: NoOptions) -> RunRef:
        return self.engine().submit(job)


TARGET = LocalTarget()

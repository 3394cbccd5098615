"""The local target: the launcher's argv and environment, run here as a detached process group."""

from __future__ import annotations

from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING

from ...spec.job_spec import JobSpec
from ..base import NoOptions, Rendered, Target
from .inputs import gpu_shortfall, input_problems, visible_gpus
from .render import render
from .section import LocalSection

if TYPE_CHECKING:
    from ...runs.state import RunRef


class LocalTarget(Target[NoOptions]):
    name = "local"
    section = LocalSection
    options = NoOptions
    status_is_free = True  # a run folder's state.json / exit.json and its processes

    def render(self, job: JobSpec) -> Rendered:
        return render(job)

    def engine(self) -> ModuleType:
        from . import engine

        return engine

    def check_inputs(self, job: JobSpec, options: NoOptions) -> list[str]:
        return input_problems(job)

    def gpus_shown(self) -> int | None:
        return visible_gpus()

    def advice(self, job: JobSpec) -> list[str]:
        return gpu_shortfall(job, self.gpus_shown())

    def schedule(self, job: JobSpec, options: NoOptions) -> RunRef:
        return self.engine().submit(job)

    def schedule_resumed(self, job: JobSpec, options: NoOptions, files: Path, subdir: str) -> tuple[RunRef, str]:
        """The run's folder made, the checkpoint copied into its checkpoint folder (its own
        `runs/<id>/checkpoints`, or the user's checkpoint.dir), then the run started."""
        run = self.engine().submit(job, checkpoint=(files, subdir))
        assert run.paths.checkpoint_dir is not None
        return run, str(Path(run.paths.checkpoint_dir) / subdir if subdir else Path(run.paths.checkpoint_dir))

    def checkpoints_here(self, run: RunRef) -> Path | None:
        return Path(run.paths.checkpoint_dir) if run.paths.checkpoint_dir else None


TARGET = LocalTarget()

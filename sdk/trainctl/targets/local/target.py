"""The local target: the launcher's argv and environment, run here as a detached process group."""

from __future__ import annotations

from pathlib import Path
from types import ModuleType

from ...run_state import RunRef
from ...spec import JobSpec
from ..base import NoOptions, Rendered, Target
from .inputs import gpu_shortfall, input_problems, visible_gpus
from .render import render
from .section import LocalSection


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
        """The checkpoint placed first, then the run started: without a checkpoint.dir of the user's, into a
        fresh folder of its own (the run's default one is named by its id, which does not exist yet)."""
        if job.checkpoint.dir is None:
            import secrets

            from ...run_store import state_dir

            fresh = str(state_dir() / "resumed" / secrets.token_hex(4) / "checkpoints")
            job = job.model_copy(update={"checkpoint": job.checkpoint.model_copy(update={"dir": fresh})})
        return super().schedule_resumed(job, options, files, subdir)

    def checkpoints_here(self, run: RunRef) -> Path | None:
        return Path(run.paths.checkpoint_dir) if run.paths.checkpoint_dir else None


TARGET = LocalTarget()

"""The SLURM target: one sbatch script per job, submitted with sbatch, watched with scontrol/sacct.

render.py is pure; engine.py runs the SLURM commands, here or through ssh to `slurm.login`.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

from pydantic import Field

from ...run_state import RunRef, RunStatus
from ...spec import JobSpec
from ..base import Rendered, SubmitOptions, Target
from .render import render
from .section import SlurmSection


class SlurmOptions(SubmitOptions):
    wait: bool = Field(False, description="Block until the job has ended.")
    timeout: float | None = Field(None, gt=0, description="With wait: give up after this many seconds.")
    poll: float = Field(2.0, gt=0, description="With wait: seconds between status checks.")


class SlurmTarget(Target[SlurmOptions]):
    name = "slurm"
    section = SlurmSection
    options = SlurmOptions

    def render(self, job: JobSpec) -> Rendered:
        return render(job)

    def schedule(self, job: JobSpec, options: SlurmOptions) -> RunRef:
        from . import engine  # the engine loads on first use: render never pays for it

        return engine.submit(job, wait=options.wait, timeout=options.timeout, poll=options.poll)

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


TARGET = SlurmTarget()

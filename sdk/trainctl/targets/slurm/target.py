"""The SLURM target: one sbatch script per job, submitted with sbatch, watched with scontrol/sacct.

render.py is pure; engine.py runs the SLURM commands, here or through ssh to `slurm.login`.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING

from pydantic import Field

from ...spec.job_spec import JobSpec
from ..base import Rendered, SubmitOptions, Target
from .render import render
from .section import SlurmSection

if TYPE_CHECKING:
    from ...runs.state import RunRef
    from ..transfer import Accept, Fetched


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

    def engine(self) -> ModuleType:
        from . import engine

        return engine

    def check_inputs(self, job: JobSpec, options: SlurmOptions) -> list[str]:
        from ..program import s3_data
        from ..s3_inputs import problems

        # the nodes read s3:// data with their own credentials (a role, the environment sbatch passes):
        # from here only a missing bucket or object is certain
        return problems(s3_data(job), here_reads_it=False)

    def schedule(self, job: JobSpec, options: SlurmOptions) -> RunRef:
        return self.engine().submit(job)

    def waits(self, options: SlurmOptions) -> tuple[float | None, float] | None:
        return (options.timeout, options.poll) if options.wait else None

    def schedule_array(self, jobs: Sequence[JobSpec], options: SlurmOptions, parallel: int, tag: str) -> list[RunRef]:
        """One array job, `--array=0-N%P` (array.py); `wait` is not for a sweep (sweep status follows it)."""
        return self.engine().submit_array(jobs, parallel, tag)

    def schedule_resumed(self, job: JobSpec, options: SlurmOptions, files: Path, subdir: str) -> tuple[RunRef, str]:
        from .checkpoint_copy import submit_resumed  # held, placed into the run's own folder, then released

        return submit_resumed(job, files, subdir)

    def fetch_checkpoints(self, run: RunRef, dest: Path, accept: Accept | None = None) -> Fetched:
        from .checkpoint_copy import fetch_checkpoints  # over the run's Shell (its login host)

        return fetch_checkpoints(run, dest, accept)

    def fetch_output(self, run: RunRef, dest: Path) -> Fetched:
        from .checkpoint_copy import fetch_output  # over the run's Shell (its login host)

        return fetch_output(run, dest)

    def checkpoints_here(self, run: RunRef) -> Path | None:
        """On this machine when the run was submitted here (no slurm.login): its folder on the shared filesystem."""
        from .handle import SlurmHandle  # here: a render loads no run records

        here = run.paths.checkpoint_dir and not SlurmHandle.of(run).login
        return Path(str(run.paths.checkpoint_dir)) if here else None


TARGET = SlurmTarget()

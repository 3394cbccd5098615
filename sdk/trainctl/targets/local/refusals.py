"""What the local target cannot run (pure): refused at render, all at once, before anything starts."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ...errors import JobError
from ..program import s3_checkpoint_problems, s3_output_problems, s3_trainer_paths

if TYPE_CHECKING:
    from ...spec.job_spec import JobSpec


def refuse(job: JobSpec) -> None:
    """What the local target cannot run, all at once (a JobError naming each)."""
    problems: list[str] = []
    if job.resources.nodes != 1:
        problems.append(
            f"resources.nodes: got {job.resources.nodes}; the local target runs on this one machine "
            "(use slurm, kubernetes or sagemaker for more nodes)"
        )
    for name, uri in job.data.items():
        if uri.startswith("pvc://"):
            problems.append(f"data.{name}: got {uri!r}; the local target reads local paths and s3:// only")
    problems += s3_trainer_paths(job)
    problems += s3_output_problems(job, None, None)  # a container gets the AWS variables (container_argv.AWS_ENV)
    problems += s3_checkpoint_problems(job)
    if problems:
        raise JobError(problems)

"""A sweep's trials as jobs: the job without its `sweep:`, each trial's values applied as `--set` would be,
all of them checked before anything is submitted (a bad value exits 2 naming the trial and the field)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ..errors import JobError
from ..spec.job_spec import JobSpec
from ..spec.sweep import Scalar, SweepSpec, as_sets, params_text, trial_params
from ..submit.preflight import check
from ..targets.base import SubmitOptions
from ..targets.lookup import get_target
from .store import Trial


def base_job(job: JobSpec) -> JobSpec:
    """The job every trial starts from: the same, without its `sweep:` section."""
    return job.model_copy(update={"search_space": None})


def rebuilt(data: dict[str, Any], base_dir: str | None) -> JobSpec:
    """The base job again from its recorded data (the detached driver), relative paths still from its folder."""
    job = JobSpec.parse(data, "sweep.json")
    job._base_dir = Path(base_dir) if base_dir else None
    return job


def trial_job(base: JobSpec, params: dict[str, Scalar], index: int) -> JobSpec:
    """The base job with the trial's values; a JobError names the trial, its values and the field."""
    try:
        return base.with_overrides(as_sets(params))
    except JobError as exc:
        raise JobError([f"trial {index} ({params_text(params)}): {p}" for p in exc.problems], "sweep") from None


def marked(job: JobSpec, target: str, sweep_id: str, index: int) -> JobSpec:
    """The trial's job as its target marks a sweep's trials (`Target.trial_job`: Kubernetes labels)."""
    return get_target(target).trial_job(job, sweep_id, index)


def refuse_shared_folders(job: JobSpec) -> None:
    """A job that names its checkpoint or output folder: every trial would share it (exit 2)."""
    shared = [f"{name}={value}" for name, value in (("checkpoint.dir", job.checkpoint.dir),
              ("output_dir", job.output_dir)) if value is not None]  # fmt: skip
    if shared:
        raise JobError(
            [f"{shared[0]}: every trial would share it (and resume from another trial's checkpoints); leave it unset "
             "so that each trial, a run, keeps its own (docs/your-program.md)"], "sweep"
        )  # fmt: skip


def checked_trials(job: JobSpec, spec: SweepSpec, target: str, options: SubmitOptions) -> list[Trial]:
    """Every trial, each validated as a job and checked by the one preflight (`preflight.check`: the target's
    fields, the code folder, the target's inputs, the render) as `submit` would check it. Nothing is submitted."""
    refuse_shared_folders(job)
    base = base_job(job)
    trials = []
    for index, params in enumerate(trial_params(spec)):
        trial = trial_job(base, params, index)  # names the trial when a value does not fit the job
        try:
            check(trial, target, options)
        except JobError as exc:
            raise JobError([f"trial {index} ({params_text(params)}): {p}" for p in exc.problems], "sweep") from None
        trials.append(Trial(index=index, params=params))
    return trials

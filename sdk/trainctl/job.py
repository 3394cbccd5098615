"""The Job users write: the spec (spec/job_spec.py, pure data) plus what acts on it, through the targets.

`Job(...).render("slurm")` shows the exact artifact, `Job(...).submit(target="slurm")` runs it and
returns a `Run`. Render goes through targets/lookup.py, submit through submit/runner.py; both sit above the spec and
the targets (which only know `JobSpec`), so nothing imports in a circle.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from pydantic import ValidationError

from .errors import JobError
from .function import COMMAND
from .spec.job_spec import JobSpec, Secret
from .spec.resources import Elastic, Resources
from .spec.trainer import Checkpoint, TrainerConfig
from .spec.validation import format_validation_error

if TYPE_CHECKING:
    from .run import Run
    from .sweeps.handle import Sweep
    from .sweeps.mapped import FunctionMap
    from .targets.base import Rendered

__all__ = ["Checkpoint", "Elastic", "Job", "Resources", "Secret", "TrainerConfig"]


class Job(JobSpec):
    """A distributed PyTorch training job, defined once for every target."""

    def __init__(self, /, **data: Any) -> None:
        """`Job(name=..., ...)` refuses a bad field as `Job.from_yaml` does: a JobError (a ValueError) naming the
        field, the value and a did-you-mean, not pydantic's raw ValidationError."""
        if "trainer" not in data and "command" not in data:  # (a job file names neither as None: JobSpec.parse)
            data["command"] = list(COMMAND)  # no program yet: `.with_function(fn)` gives it (bundle.prepare checks)
        try:
            super().__init__(**data)
        except ValidationError as exc:
            raise JobError(format_validation_error(exc, type(self))) from None

    def __repr__(self) -> str:
        """The job as its YAML (the fields that differ from the defaults), not one long pydantic line."""
        return f"Job:\n{self.__str__()}"

    def __str__(self) -> str:
        return "".join(f"  {line}\n" for line in self.to_yaml().splitlines())

    def validate(self, target: str = "local", **options: Any) -> list[str]:  # type: ignore[override]
        """`job.check(target)`: pydantic's deprecated `BaseModel.validate` classmethod is not what a job means."""
        return self.check(target, **options)

    def render(self, target: str = "local") -> Rendered:
        """The target's exact artifact (pure: nothing is submitted)."""
        from .targets.lookup import render  # not submit/runner.py's submit machinery; `import trainctl` stays light

        return render(self, target)

    def check(self, target: str = "local", **options: Any) -> list[str]:
        """Raise JobError (a ValueError) for anything `submit(target, **options)` would refuse before asking the
        engine: the target's section, the code folder, the command's script, the local data files, the render.
        Returns the warnings `trainctl validate` prints (what would run, but likely not as meant: idle GPUs)."""
        from .submit.preflight import advice, check
        from .targets.lookup import get_target
        from .targets.registry import canonical

        check(self, target, get_target(canonical(target)).parse_options(**options))
        return advice(self, target)

    def submit(self, target: str = "local", resume_from: Run | str | None = None, **options: Any) -> Run:
        """Validate for the target, submit, record the run; `options` are the target's submit options.

        `resume_from` (a run or its id): continue that run here from its newest checkpoint that verifies.
        """
        from .submit.runner import submit

        return submit(self, target, resume_from, **options)

    def with_function(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Job:
        """The same job, with `fn(*args, **kwargs)` as the program every process runs under the launcher (as a
        `command:` is run). `fn` is pickled now (cloudpickle: by value from a notebook or `__main__`), so what cannot
        travel is refused here, naming it; `run.result()` brings its value (or raises its error) back."""
        from .function import ship

        shipped = ship(fn, args, kwargs)
        job = self.model_copy(update={"command": list(COMMAND), "trainer": None})
        return job._with_private("_function", shipped)

    def map(
        self, items: Sequence[Mapping[str, Any]], target: str = "local", *, parallel: int = 1, **options: Any
    ) -> FunctionMap:
        """Run the job's function once per item (a dict of keyword arguments over the call's), as a sweep runs its
        trials (a SLURM array on SLURM), at most `parallel` at once; `.results()` come back in input order.
        Every item and trial is checked first: a bad one queues nothing (JobError)."""
        from .sweeps.mapped import start_map

        return start_map(self, items, target, parallel, **options)

    def sweep(self, target: str = "local", *, options: dict[str, Any] | None = None, **space: Any) -> Sweep:
        """Run a sweep of this job (docs/sweeps.md): `space` is the `sweep:` section's fields (grid={"trainer.lr":
        [1e-3, 3e-3]}, random={...}, trials, parallel, metric, mode, seed, early_stopping), on top of the job's
        own `sweep:`; `options` are the target's submit options. Every trial is checked first (JobError)."""
        from .spec.sweep import merged
        from .sweeps.handle import start

        return start(self, merged(self.search_space, **space), target, **(options or {}))

    def to_estimator(self, **options: Any) -> Any:
        """A `sagemaker.pytorch.PyTorch` estimator equal to this job (needs the SageMaker SDK 2.x)."""
        from .targets.sagemaker.estimator import to_estimator

        return to_estimator(self, **options)

    def to_model_trainer(self, **options: Any) -> Any:
        """A `sagemaker.train.ModelTrainer` equal to this job (needs the SageMaker SDK 3.x), running trainctl's launcher."""
        from .targets.sagemaker.model_trainer import to_model_trainer

        return to_model_trainer(self, **options)

"""The strict base every part of a job file uses: unknown keys are errors, not silently dropped."""

from __future__ import annotations

from typing import TYPE_CHECKING, ClassVar

from pydantic import BaseModel, ConfigDict

if TYPE_CHECKING:
    from .errors import FieldProblem
    from .spec import JobSpec


class Section(BaseModel):
    """A part of the job spec. Frozen so a rendered job cannot change under its artifact."""

    # allow_inf_nan=False: `.inf`/`.nan` in YAML would reach the trainer as "inf" and JSON as Infinity
    # strict=True: a scalar takes only its own type (YAML gives real types): `true` is not 1, "2" is not 2.
    model_config = ConfigDict(extra="forbid", frozen=True, validate_default=True, allow_inf_nan=False, strict=True)

    def required_for_submit(self) -> list[str]:
        """Problems that only matter when submitting to this section's target (empty: ready)."""
        return []


class TargetSection(Section):
    """A target's own part of the job (`slurm:`, `kubernetes:`...), declared by its plug-in (registry.py); the
    spec adds one optional field per installed target, named as the target."""

    code_alias: ClassVar[str | None] = None
    """A field of this section that names the job's code folder under an older name (sagemaker.source_dir):
    the spec reads it as `code: <that folder>`, and refuses a job that gives both."""

    def problem_with(self, job: JobSpec) -> FieldProblem | None:
        """The first setting of this section that cannot work with the rest of `job` (checked as the job is
        validated, the field named), or None. A target's own rules live here, not in the spec."""
        return None

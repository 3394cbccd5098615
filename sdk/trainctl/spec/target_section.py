"""A target's own part of the job (`slurm:`, `kubernetes:`...), and what its rules may read of the rest of the job."""

from __future__ import annotations

from collections.abc import Mapping
from typing import ClassVar, Literal, Protocol

from ..errors import FieldProblem
from .resources import Resources
from .section import Section
from .trainer import TrainerConfig


class JobShape(Protocol):
    """What a target section's rules and the launch rules read of the job being validated. `JobSpec` has each
    of these; a Protocol, so that the parts the spec is assembled from need not import the spec."""

    @property
    def resources(self) -> Resources: ...
    @property
    def launch(self) -> Literal["torchrun", "per_node"]: ...
    @property
    def command(self) -> list[str] | None: ...
    @property
    def trainer(self) -> TrainerConfig | None: ...
    @property
    def env(self) -> Mapping[str, str]: ...
    @property
    def model_fields_set(self) -> set[str]: ...


class TargetSection(Section):
    """A target's own part of the job (`slurm:`, `kubernetes:`...), declared by its plug-in (targets/registry.py); the
    spec adds one optional field per installed target, named as the target."""

    code_alias: ClassVar[str | None] = None
    """A field of this section that names the job's code folder under an older name (sagemaker.source_dir):
    the spec reads it as `code: <that folder>`, and refuses a job that gives both."""

    def problem_with(self, job: JobShape) -> FieldProblem | None:
        """The first setting of this section that cannot work with the rest of `job` (checked as the job is
        validated, the field named), or None. A target's own rules live here, not in the spec."""
        return None

"""The job spec: one typed description of a training job, the same for every target. Pure data.

No I/O but reading YAML, and no import of anything that acts on a job: the targets import this,
and `trainctl.job.Job` (this plus render/submit) sits above them. Nor of any target: each installed
target's plug-in (targets/registry.py) brings its section, and `JobSpec` is `JobFields` plus one optional field
per target, named as the target (`slurm:`), built here when this module is first imported.
"""

from __future__ import annotations

import re
import warnings
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Literal, TypeVar

from pydantic import ConfigDict, Field, PrivateAttr, ValidationError, create_model, field_validator, model_validator
from typing_extensions import Self

from ..errors import FieldProblem, JobError
from ..function import Function
from ..runs.causes import DEFAULT_RETRY_ON, NEVER_RETRIED, Cause
from ..runs.identity import RunIdentity
from ..targets.registry import sections, unknown
from ..version import DEFAULT_IMAGE
from . import names as job_names
from .code import Code, Prepared
from .hang import Hang
from .launching import check_launch
from .loading import apply_overrides, dump_yaml, load_yaml, read_job_file
from .resources import Resources
from .section import Section
from .sweep import SweepSpec
from .target_section import TargetSection
from .tracking import ENV_NAME, SECRET_VARIABLES, Secret, TrackerRun, Tracking, tracker_env
from .trainer import DATA_HELP, Checkpoint, TrainerConfig, check_data, check_streams, data_schema, split_data_modes
from .units import DURATION_HELP, parse_duration
from .validation import format_validation_error

SectionT = TypeVar("SectionT", bound=TargetSection)
# Set by the launcher and torchrun on every target; a job must not fight them.
RESERVED_ENV = frozenset(
    {"RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "GROUP_RANK"}
)


class JobFields(Section):
    """A distributed PyTorch training job, defined once for every target (as data; see job.Job)."""

    # `sweep:` in a file, `search_space` in a model_dump; defer_build: JobFields, JobSpec and job.Job are built
    model_config = ConfigDict(populate_by_name=True, defer_build=True)  # on first use, not all three at import

    name: str = Field(
        ..., description="At most 63 lowercase letters, digits and '-'; it starts with a letter, does not end with '-'."
    )
    image: str = Field(DEFAULT_IMAGE, description="Trainer image, by tag or digest.")
    trainer: TrainerConfig | None = Field(None, description="Run the built-in trainer with this config.")
    command: list[str] | None = Field(None, description="Or run this argv on every process, under the launcher.")
    launch: Literal["torchrun", "per_node"] = Field(
        "torchrun",
        description="torchrun: trainctl's torchrun starts procs_per_node processes per node; per_node: the command "
        "is your own launcher, started once per node with NNODES, NODE_RANK, MASTER_ADDR, MASTER_PORT, NPROC_PER_NODE.",
    )
    hang: Hang | None = Field(None, description="command: jobs: a hang is no progress line for `quiet_for`.")
    code: Code | None = Field(
        None,
        description="Your code folder, shipped as a verified bundle (no image build); `code: ./src` is short.",
        json_schema_extra=lambda schema: schema["anyOf"].insert(1, {"type": "string"}),  # type: ignore[union-attr]
    )
    resources: Resources = Field(default_factory=lambda: Resources(), description="Nodes, processes and GPUs.")
    data: dict[str, str] = Field(default_factory=dict, description=DATA_HELP, json_schema_extra=data_schema)
    data_stream: list[str] = Field(default_factory=list, description="The inputs read straight from S3 (mode: stream).")
    checkpoint: Checkpoint = Field(
        default_factory=lambda: Checkpoint(), description="Where and how often to checkpoint; resume."
    )
    output_dir: str | None = Field(
        None,
        description="Default: the target's output location. s3://bucket/prefix: written locally, then uploaded "
        "after each attempt into a folder named by the run uid under it (SageMaker: OutputDataConfig); docs/data.md.",
    )
    env: dict[str, str] = Field(
        default_factory=dict,
        description="Environment variables for every process; a number becomes its text (`SEED: 3` is "
        "\"3\"), a boolean is refused: quote it (`DEBUG: 'true'`).",
    )
    secrets: list[Secret] = Field(
        default_factory=list, description="Secrets as environment variables; only their names are written down."
    )
    max_runtime: str | int | None = Field(None, description=DURATION_HELP)
    retries: int = Field(0, ge=0, le=100, description="Whole-job retries by the target (not torchrun restarts).")
    retry_on: list[Annotated[Cause, Field(strict=False)]] = Field(
        list(DEFAULT_RETRY_ON),
        description="Which causes of an attempt's end are retried (docs/reliability.md); default every cause "
        "but invalid input, which is never retried. At most retries + 1 attempts in all.",
    )
    spot: bool = Field(False, description="Run on preemptible capacity where the target offers it.")
    tracking: Tracking | None = Field(None, description="MLflow / W&B: one tracker run across every attempt.")
    search_space: SweepSpec | None = Field(
        None, alias="sweep", description="A search space: `trainctl sweep` runs one trial per point (docs/sweeps.md)."
    )  # written `sweep:`; named otherwise here so that `Job.sweep(...)` can be the method that runs it
    # ... and one `<target>: <its section> | None` per installed target, added below (JobSpec).

    _base_dir: Path | None = PrivateAttr(None)
    _prepared: Prepared | None = PrivateAttr(None)
    _tracker_run: TrackerRun | None = PrivateAttr(None)  # fixed at submit (submit/runner.py), not part of the spec
    _identity: RunIdentity | None = PrivateAttr(None)  # the same: the run's uid (identity.py)
    _function: Function | None = PrivateAttr(None)  # Job.with_function's payload, shipped in the code bundle

    @field_validator("name")
    @classmethod
    def _name_everywhere_valid(cls, value: str) -> str:
        found = job_names.problem(value)
        if found is not None:
            raise ValueError(found)
        return value

    @field_validator("image")
    @classmethod
    def _image_reference(cls, value: str) -> str:
        ref = r"[a-z0-9]+([._-][a-z0-9]+)*(:\d+)?(/[a-z0-9]+([._/-][a-z0-9]+)*)*"
        if not re.fullmatch(ref + r"(:[\w][\w.-]{0,127})?(@sha256:[0-9a-f]{64})?", value):
            raise ValueError('expected an image reference such as "registry/repo:tag" or "repo@sha256:<64 hex>"')
        return value

    @field_validator("command")
    @classmethod
    def _command_nonempty(cls, value: list[str] | None) -> list[str] | None:
        if value is not None and (not value or not value[0].strip()):
            raise ValueError("must be a non-empty list whose first item is the program")
        return value

    @field_validator("retry_on")
    @classmethod
    def _retry_on_retriable(cls, value: list[Cause]) -> list[Cause]:
        never = [c.value for c in value if c in NEVER_RETRIED]
        if never:
            raise ValueError(f"{', '.join(never)}: invalid input (exit 2) is never retried; the same input fails again")
        return list(dict.fromkeys(value))

    @field_validator("data")
    @classmethod
    def _data_inputs(cls, value: dict[str, str]) -> dict[str, str]:
        return check_data(value)

    @model_validator(mode="before")
    @classmethod
    def _data_modes(cls, value: Any) -> Any:
        return split_data_modes(value)

    @field_validator("env", mode="before")
    @classmethod
    def _env_values_as_text(cls, value: Any) -> Any:
        """As docker-compose reads `environment:`: a number is its text (`SEED: 3` is "3", `LR: 1e-3` is
        "0.001"); a boolean or an empty value is refused with the quoting that says what was meant."""
        if not isinstance(value, dict):
            return value
        out = {}
        for key, item in value.items():
            if isinstance(item, bool) or item is None:
                word = "" if item is None else str(item).lower()
                kind = "no value" if item is None else f"{word}, a YAML boolean (so are yes, no, on, off)"
                raise FieldProblem(
                    str(key),
                    f"got {kind}; an environment value is text: quote it, {key}: '{word}' in YAML, "
                    f'--set "env.{key}=\'{word}\'" on the command line, "{word}" in Python',
                )
            out[key] = str(item) if isinstance(item, (int, float)) else item
        return out

    @field_validator("env")
    @classmethod
    def _env_names(cls, value: dict[str, str]) -> dict[str, str]:
        for key in value:
            if not ENV_NAME.match(key):
                raise ValueError(f"{key!r} is not an environment variable name (letters, digits, _)")
            if key in RESERVED_ENV:
                raise ValueError(f"{key} is set by the launcher on every target; remove it from env")
            if key in SECRET_VARIABLES:
                raise ValueError(f"{key} is a credential: pass it through `secrets:`, which writes down only its name")
        return value

    @field_validator("max_runtime")
    @classmethod
    def _runtime_parses(cls, value: str | int | None) -> str | int | None:
        if value is not None:
            parse_duration(value)
        return value

    @model_validator(mode="after")
    def _cross_field_rules(self) -> Self:
        if (self.trainer is None) == (self.command is None):
            raise FieldProblem(
                "trainer", "give exactly one of `trainer:` (the built-in trainer) or `command:` (your program)"
            )
        if self.hang is not None and self.trainer is not None:
            raise FieldProblem(
                "hang", "hang: is for command: jobs; the built-in trainer has its own watchdog (trainer.hang_timeout)"
            )
        if self.trainer is not None:
            if self.trainer.train_data is None and "train" not in self.data:
                raise FieldProblem(
                    "trainer.train_data",
                    "trainer needs training data: set trainer.train_data or a data input named 'train'",
                )
            world = self.resources.world_size
            gbs = self.trainer.global_batch_size
            if gbs is not None:
                per_step = world * self.trainer.grad_accum
                if gbs < world or gbs % per_step:
                    raise FieldProblem(
                        "trainer.global_batch_size",
                        f"trainer.global_batch_size={gbs} must be a multiple of world size x grad_accum "
                        f"= {world} x {self.trainer.grad_accum} = {per_step}",
                    )
            if self.resources.gpus_per_node == 0 and self.trainer.backend == "nccl":
                raise FieldProblem(
                    "trainer.backend", "trainer.backend=nccl needs GPUs: set resources.gpus_per_node or use gloo/auto"
                )
            if self.trainer.precision == "fp16" and self.resources.gpus_per_node == 0:
                raise FieldProblem(
                    "trainer.precision", "trainer.precision=fp16 needs GPUs (GradScaler); use bf16 or fp32 on CPU"
                )
        alias = self._code_alias()
        if alias is not None:
            if self.code is not None:
                raise FieldProblem(alias[0], f"give `code:` only; {alias[0]} is its old alias")
            warnings.warn(
                f"{alias[0]} is deprecated: write `code: <dir>` at the job level (it works on every target)",
                FutureWarning,
                stacklevel=2,
            )
        check_launch(self)
        check_streams(self.data, self.data_stream, self.trainer)
        names = [s.env for s in self.secrets]
        clash = sorted({n for n in names if names.count(n) > 1} | (set(names) & set(self.env)))
        if clash:
            raise FieldProblem("secrets", f"secret env names must be unique and not also in env: {', '.join(clash)}")
        return self

    # ---- derived values every target reads ----

    @property
    def max_runtime_seconds(self) -> int | None:
        return parse_duration(self.max_runtime) if self.max_runtime is not None else None

    @property
    def code_spec(self) -> Code | None:
        """The job's `code:`, or a section's old name for it (`sagemaker.source_dir`) read as `code: <dir>`."""
        alias = self._code_alias()
        if self.code is None and alias is not None:
            return Code(dir=alias[1])
        return self.code

    @property
    def code_field(self) -> str:
        """The field the job names its code folder in: `code.dir`, or a section's old name for it."""
        alias = self._code_alias()
        return alias[0] if self.code is None and alias is not None else "code.dir"

    def _code_alias(self) -> tuple[str, str] | None:
        """(`<target>.<field>`, the folder) of a section that names the code folder by its old name."""
        for name, kind in sections().items():
            found = getattr(self, name, None)
            value = getattr(found, kind.code_alias, None) if kind.code_alias and found is not None else None
            if value is not None:
                return f"{name}.{kind.code_alias}", str(value)
        return None

    @property
    def base_dir(self) -> Path | None:
        """The folder of the job file it came from, for resolving relative local paths."""
        return self._base_dir

    @property
    def prepared(self) -> Prepared | None:
        """The code bundle the explicit step packed for this job (trainctl.submit.bundle.prepare), if it still fits
        the job (same `code:`, same job folder); None: not prepared, or prepared for another job."""
        found = self._prepared
        return found if found is not None and found.fits(self.code_spec, self._base_dir, self._function) else None

    @property
    def function(self) -> Function | None:
        """The function this job runs as its program (Job.with_function), None for any other job."""
        return self._function

    def _with_private(self, name: str, value: Any) -> Self:
        job = self.model_copy()
        setattr(job, name, value)
        return job

    def with_prepared(self, prepared: Prepared) -> Self:
        """A copy that carries `prepared` (the bundle step's answer), for render and submit to read."""
        return self._with_private("_prepared", prepared)

    @property
    def process_env(self) -> dict[str, str]:
        """What every process gets from the job: its `env`, its tracker's (tracking_spec.tracker_env), its uid."""
        uid = self._identity.env() if self._identity is not None else {}
        call = self._function.env() if self._function is not None else {}
        return {**self.env, **tracker_env(self.tracking, self._tracker_run), **uid, **call}

    @property
    def run_identity(self) -> RunIdentity | None:
        """The uid submit gave this run (None: not submitted, e.g. `trainctl render` or `k8s apply`)."""
        return self._identity

    def with_identity(self, identity: RunIdentity | None) -> Self:
        """A copy whose processes and files carry `identity` (identity.py); None: none (`k8s apply`)."""
        return self._with_private("_identity", identity)

    @property
    def tracker_run(self) -> TrackerRun | None:
        """The tracker run submit fixed for this job (None: not submitted, or no `tracking:`)."""
        return self._tracker_run

    def with_tracker_run(self, run: TrackerRun) -> Self:
        """A copy whose processes log into `run` (each target exports `tracker_env`)."""
        return self._with_private("_tracker_run", run)

    def section(self, target: str) -> TargetSection:
        """The target's section, or its defaults when the job has none."""
        kinds = sections()
        if target not in kinds:
            raise unknown(target)
        found: TargetSection | None = getattr(self, target)
        return found if found is not None else kinds[target]()

    def section_as(self, target: str, kind: type[SectionT]) -> SectionT:
        """The target's section as its own class, for the target's modules that read its typed fields (the
        spec builds the field from the plug-in's class, so anything else is a broken plug-in)."""
        found = self.section(target)
        if not isinstance(found, kind):
            raise TypeError(f"the {target} section is a {type(found).__name__}, not a {kind.__name__}")
        return found

    def check_target(self, target: str) -> None:
        """Raise JobError if the job lacks what `target` needs (required fields of its section)."""
        problems = self.section(target).required_for_submit()
        if problems:
            raise JobError(problems)

    # ---- loading and saving ----

    @classmethod
    def parse(cls, data: Any, source: str | None = None) -> Self:
        """Validate plain data into a Job, with errors that name each field, value and what is accepted."""
        if not isinstance(data, dict):
            raise JobError([f"the job must be a mapping of fields, got {type(data).__name__}"], source)
        try:  # a file without `trainer:` or `command:` has no program (only Python's Job() may get a function's)
            return cls.model_validate({"trainer": None, "command": None, **data})
        except ValidationError as exc:
            raised = [(err.get("ctx") or {}).get("error") for err in exc.errors()]
            if len(raised) == 1 and isinstance(raised[0], JobError):  # job.Job's __init__ already said it
                raise JobError(raised[0].problems, source) from None
            raise JobError(format_validation_error(exc, cls), source) from None

    @classmethod
    def from_yaml_text(cls, text: str, source: str | None = None) -> Self:
        return cls.parse(load_yaml(text, source), source)

    @classmethod
    def from_yaml(cls, path: str | Path, overrides: list[str] | None = None) -> Self:
        """The job in a file, with `key.path=value` overrides applied before it is validated, so that
        `--set name=ok` mends the file's own bad value (as `helm --set` does)."""
        path = Path(path)
        data = load_yaml(read_job_file(path), str(path))
        if overrides and isinstance(data, dict):
            data = apply_overrides(data, overrides)
        job = cls.parse(data, str(path) + (" with --set" if overrides else ""))
        job._base_dir = path.resolve().parent
        return job

    def to_dict(self) -> dict[str, Any]:
        """Only what differs from the defaults, so a dumped job reads like a written one."""
        return self.model_dump(mode="json", exclude_defaults=True, by_alias=True)

    def to_yaml(self) -> str:
        return dump_yaml(self.to_dict())

    def with_overrides(self, assignments: list[str]) -> Self:
        """A copy with `key.path=value` overrides applied (values are parsed as YAML scalars)."""
        job = type(self).parse(apply_overrides(self.model_dump(mode="json", by_alias=True), assignments), "--set")
        job._base_dir = self._base_dir
        return job


def _with_sections(fields: type[JobFields]) -> type[JobFields]:
    """`fields` plus `<name>: <section> | None = None` for each installed target (its plug-in's section)."""
    added: dict[str, Any] = {name: (kind | None, None) for name, kind in sections().items()}
    clash = sorted(set(added) & set(fields.model_fields))
    if clash:
        raise TypeError(f"a target may not be named as a job field: {', '.join(clash)}")
    return create_model("JobSpec", __base__=fields, __module__=__name__, __doc__=fields.__doc__, **added)


if TYPE_CHECKING:
    JobSpec = JobFields
else:
    JobSpec = _with_sections(JobFields)

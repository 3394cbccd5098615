"""The built-in trainer's settings (`trainer:`) and the checkpoint cadence (`checkpoint:`): the SDK's
side of the trainer contract. Pure data, like the rest of the spec (`spec/job_spec.py` holds the job)."""

from __future__ import annotations

import re
from typing import Any, Literal

from pydantic import ConfigDict, Field, field_validator, model_validator

from ..errors import FieldProblem, did_you_mean
from .section import Section

BUILTIN_MODELS = ("digits", "mlp-regression")
"""The trainer's built-in models (trainer/training/models.py BUILTINS; tests/test_trainer_contract.py keeps them equal)."""


class TrainerConfig(Section):
    """The built-in trainer's settings, passed through as `python -m trainer.train --field value`.

    The trainer owns these fields (`TrainConfig` in trainer_image/trainer/config.py, the table in
    docs/contracts.md section 2); `checkpoint:` and each target supply the rest
    (`targets/program.py`). tests/test_trainer_contract.py fails when the two drift apart.
    """

    model: str = Field(
        "digits", description='Built-in ("digits", "mlp-regression") or your own "package.module:build_fn".'
    )
    model_args: dict[str, Any] = Field(default_factory=dict, description="Keyword arguments for the model builder.")
    train_data: str | None = Field(None, description="Default: the job's data input named 'train'.")
    val_data: str | None = Field(None, description="Default: the job's data input named 'val', if any.")
    streaming: bool = Field(False, description="A rank-sharded streaming reader instead of a DistributedSampler.")
    shuffle_buffer: int = Field(
        0, ge=0, description="Streaming: records in the seeded shuffle buffer (0 = file order)."
    )
    batch_size: int = Field(32, ge=1, le=1_000_000)
    global_batch_size: int | None = Field(None, ge=1)
    epochs: int = Field(1, ge=1, le=100_000)
    max_steps: int | None = Field(None, ge=1)
    optimizer: Literal["adamw", "sgd"] = "adamw"
    lr: float = Field(1e-3, gt=0, le=10)
    weight_decay: float = Field(0.0, ge=0)
    lr_schedule: Literal["cosine", "constant"] = "cosine"
    warmup_steps: int = Field(0, ge=0)
    grad_accum: int = Field(1, ge=1, le=4096)
    clip_grad: float = Field(1.0, ge=0)
    precision: Literal["fp32", "bf16", "fp16"] = "fp32"
    strategy: Literal["ddp", "fsdp"] = "ddp"
    backend: Literal["auto", "nccl", "gloo"] = "auto"
    seed: int = Field(0, ge=0)
    deterministic: Literal["auto", "true", "false"] = Field(
        "auto",
        description="true: deterministic algorithms, a bit-identical resume (1.41x the step time of a 98M "
        "transformer on an H100); false: faster kernels; auto: true on CPU, false on CUDA.",
    )
    compile: bool = Field(
        False,
        description="torch.compile the model: faster steps after a first step that compiles (its seconds are "
        "in the log); checkpoints keep the model's own keys.",
    )
    num_workers: int = Field(0, ge=0, le=64)
    log_every: int = Field(10, ge=1)
    timeout_s: int = Field(1800, ge=10)
    hang_timeout: int | None = Field(
        None,
        ge=1,
        description="Seconds without a completed step that make a hang (exit 200, failure.json); less than "
        "timeout_s. Default: adaptive, 10x the slowest recent step, at least 60 s (docs/trainer.md).",
    )
    startup_timeout: int | None = Field(
        None,
        ge=1,
        description="Seconds the start (rendezvous, process group, data, model, resume) may take before a rank "
        "stuck there is a hang; less than timeout_s. Default: from hang_timeout and the world size (docs/trainer.md).",
    )
    straggler_factor: float = Field(
        2.0,
        gt=1,
        le=100,
        description="A rank whose compute time per step is above this x the median of all ranks is a slow node.",
    )
    stragglers: Literal["warn", "exclude"] = Field(
        "warn", description="exclude: also checkpoint and exit 201, so a retry leaves the slow node out."
    )

    @model_validator(mode="after")
    def _hang_below_timeout(self) -> TrainerConfig:
        for name in ("hang_timeout", "startup_timeout"):
            value = getattr(self, name)
            if value is not None and value >= self.timeout_s:
                raise FieldProblem(
                    name,
                    f"{name}={value} must be less than timeout_s={self.timeout_s} (the collective's own "
                    "timeout, which would fire first); lower it, raise timeout_s, or leave it unset",
                )
        return self

    @field_validator("deterministic", mode="before")
    @classmethod
    def _deterministic_text(cls, value: Any) -> Any:
        """YAML's `deterministic: true` is a bool: the choice is its text, as the trainer reads it."""
        return ("true" if value else "false") if isinstance(value, bool) else value

    @field_validator("model")
    @classmethod
    def _model_name(cls, value: str) -> str:
        """A built-in the trainer does not have fails its run seconds after the start: refuse it here."""
        if not re.fullmatch(r"[a-z0-9-]+|[A-Za-z_][\w.]*:[A-Za-z_]\w*", value):
            raise ValueError('expected a built-in model name (e.g. "digits") or "package.module:build_fn"')
        if ":" not in value and value not in BUILTIN_MODELS:
            raise ValueError(
                f"no built-in model of that name{did_you_mean(value, BUILTIN_MODELS)}; expected one of "
                f'{", ".join(BUILTIN_MODELS)}, or your own "package.module:build_fn"'
            )
        return value


class Checkpoint(Section):
    """Where and how often rank 0 saves; every target resumes from the newest complete one."""

    dir: str | None = Field(None, description="Default: the target's checkpoint location.")
    every_steps: int = Field(100, ge=1)
    keep: int = Field(3, ge=1, le=1000)
    resume: str = Field("auto", description='"auto", "never" or a checkpoint path.')
    async_: bool = Field(
        False,
        alias="async",
        description="Write checkpoints in a background thread; the step loop waits only for a CPU copy (DDP).",
    )

    model_config = ConfigDict(populate_by_name=True)


_DATA_NAME = re.compile(r"^[a-z][a-z0-9_-]{0,31}$")
DATA_MODES = ("stage", "stream")
DATA_HELP = "Named inputs: a path, s3:// or pvc://; {uri: s3://..., mode: stream} streams it (docs/data.md)."


def data_schema(schema: dict[str, Any]) -> None:
    """The JSON schema a file is checked against takes an entry's mapping form too (what `split_data_modes` reads)."""
    entry = {"type": "object", "required": ["uri"], "additionalProperties": False,
             "properties": {"uri": {"type": "string"}, "mode": {"enum": list(DATA_MODES)}}}  # fmt: skip
    schema["additionalProperties"] = {"anyOf": [{"type": "string"}, entry]}


def split_data_modes(fields: Any) -> Any:
    """A job's raw fields with each `data:` entry written `{uri: ..., mode: stage|stream}` made its URI, the
    streamed names added to `data_stream`: one spelling in the model, the mapping only where it reads best."""
    if not isinstance(fields, dict) or not isinstance(fields.get("data"), dict):
        return fields
    data, streamed = {}, list(fields.get("data_stream") or [])
    for name, entry in fields["data"].items():
        if not isinstance(entry, dict):
            data[name] = entry
            continue
        extra = sorted(set(entry) - {"uri", "mode"})
        if extra or not isinstance(entry.get("uri"), str):
            raise ValueError(
                f"data.{name}: expected a location, or {{uri: <location>, mode: stage|stream}}; got {entry!r}"
            )
        mode = entry.get("mode", "stage")
        if mode not in DATA_MODES:
            raise ValueError(f"data.{name}.mode: got {mode!r}; expected stage (copy once into a cache) or stream")
        data[name] = entry["uri"]
        streamed += [name] if mode == "stream" and name not in streamed else []
    return {**fields, "data": data, "data_stream": streamed}


def check_data(value: dict[str, str]) -> dict[str, str]:
    """Each input's name and location: a path, s3://, pvc:// or file://."""
    for name, uri in value.items():
        if not _DATA_NAME.match(name):
            raise ValueError(f"input name {name!r}: expected lowercase letters, digits, _ or -, at most 32")
        if not uri.strip():
            raise ValueError(f"input {name!r}: the location is empty")
        scheme = uri.split("://", 1)[0] if "://" in uri else None
        if scheme not in (None, "s3", "pvc", "file"):
            raise ValueError(f"input {name!r}: scheme {scheme}:// is not supported; use a path, s3:// or pvc://")
    return value


def check_streams(data: dict[str, str], streamed: list[str], trainer: TrainerConfig | None) -> None:
    """A streamed input is an s3:// one the job names, and the built-in trainer streams only `train` (with its
    rank-sharded reader, `trainer.streaming: true`) and `val` (each rank its share, whatever `streaming` says);
    each problem says what to change."""
    for name in streamed:
        where = f"data.{name}"
        if name not in data:
            raise FieldProblem("data_stream", f"{name!r} is no input under data:; name one of {sorted(data)}")
        if not data[name].startswith("s3://"):
            raise FieldProblem(where, f"mode: stream reads straight from S3; {data[name]!r} is no s3:// URI: drop mode")
        if trainer is None:
            continue
        if name not in ("train", "val") or getattr(trainer, f"{name}_data") is not None:
            raise FieldProblem(where, "the built-in trainer streams its training and validation data only (data.train "
                               "and data.val, without trainer.train_data or val_data); use mode: stage here")  # fmt: skip
        if name == "train" and not trainer.streaming:
            raise FieldProblem(where, "mode: stream needs the rank-sharded reader: set trainer.streaming: true")

"""The job's `trainer:` section: the built-in trainer's settings, as the SDK writes them (pure data).

The trainer owns these fields (`TrainConfig` in trainer_image/trainer/config.py, the table in
docs/contracts.md section 2); tests/test_trainer_contract.py fails when the two drift apart.
"""

from __future__ import annotations

import re
from typing import Any, Literal

from pydantic import Field, field_validator

from .section import Section


class TrainerConfig(Section):
    """The built-in trainer's settings, passed through as `python -m trainer.train --field value`.

    The trainer owns these fields (`TrainConfig` in trainer_image/trainer/config.py, the table in
    docs/contracts.md section 2); `checkpoint:` and each target supply the rest
    (`targets/program.py`). tests/test_trainer_contract.py fails when the two drift apart.
    """

    model: str = "digits"
    model_args: dict[str, Any] = Field(default_factory=dict)
    train_data: str | None = Field(None, description="Default: the job's data input named 'train'.")
    val_data: str | None = Field(None, description="Default: the job's data input named 'val', if any.")
    streaming: bool = False
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
    deterministic: bool = Field(
        True, description="Deterministic algorithms (bit-identical resume); false trades that for speed."
    )
    num_workers: int = Field(0, ge=0, le=64)
    log_every: int = Field(10, ge=1)
    timeout_s: int = Field(1800, ge=10)

    @field_validator("model")
    @classmethod
    def _model_name(cls, value: str) -> str:
        if not re.fullmatch(r"[a-z0-9-]+|[A-Za-z_][\w.]*:[A-Za-z_]\w*", value):
            raise ValueError('expected a built-in model name (e.g. "digits") or "package.module:build_fn"')
        return value

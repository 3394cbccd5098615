"""`precision: fp32 | bf16 | fp16`, applied: the autocast region of forward passes (training and
evaluation alike), and the loss scaler fp16 needs (a no-op otherwise)."""

from __future__ import annotations

import contextlib
from typing import Any

import torch


def autocast(precision: str, device: torch.device) -> contextlib.AbstractContextManager[Any]:
    if precision == "fp32":
        return contextlib.nullcontext()
    dtype = torch.bfloat16 if precision == "bf16" else torch.float16
    return torch.autocast(device_type=device.type, dtype=dtype)


def grad_scaler(precision: str, device: torch.device) -> torch.amp.GradScaler:
    return torch.amp.GradScaler(device.type, enabled=precision == "fp16")

"""The model a finished run leaves in its output folder, for inference without trainctl or the checkpoint's
optimizer state.

At the end of training rank 0 writes `model.module`'s weights (the unwrapped model, as the DDP tutorials teach;
FSDP first gathers a full state dict on every rank, torch.distributed.checkpoint.state_dict's
`get_model_state_dict` with `full_state_dict=True`):
- `model.safetensors` (safetensors' `save_file`: no pickle, so loading runs no code), where the tensors allow
  it. safetensors refuses tensors that share storage (tied weights, such as an embedding reused as the
  output layer), so such a model is written as
- `model.pt`, a plain `torch.save` of the state dict, read back with `torch.load(..., weights_only=True)`;
- `model.json`: what rebuilds the model around the weights (`model`, `model_args`, `input_shape`,
  `output_dim`, `task`), the file's name and sha256, the step and the run's uid.

Both are replaced whole (written aside, then renamed). On SageMaker the output folder is `/opt/ml/model`,
so the job's `model.tar.gz` holds them. docs/trainer.md "The final model" loads one in ten lines.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from torch import nn

from ..log import log

JSON_NAME = "model.json"
SAFETENSORS_NAME = "model.safetensors"
PICKLE_NAME = "model.pt"


def full_state_dict(model: nn.Module, strategy: str) -> dict[str, torch.Tensor]:
    """Collective under FSDP (every rank calls it; only rank 0's dict is full); the unwrapped model's own
    state dict otherwise. Tensors on the CPU, contiguous."""
    if strategy == "fsdp" and dist.is_initialized():
        from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

        found: dict[str, Any] = get_model_state_dict(
            model, options=StateDictOptions(full_state_dict=True, cpu_offload=True)
        )
    else:
        found = model.state_dict()
    return {name: t.detach().to("cpu").contiguous() for name, t in found.items() if isinstance(t, torch.Tensor)}


def shares_storage(state: dict[str, torch.Tensor]) -> list[tuple[str, str]]:
    """Pairs of names whose tensors share memory (safetensors' `save_file` refuses those)."""
    seen: dict[tuple[int, int], str] = {}
    shared = []
    for name, tensor in state.items():
        key = (tensor.untyped_storage().data_ptr(), tensor.untyped_storage().nbytes())
        if key in seen and tensor.numel():
            shared.append((seen[key], name))
        seen.setdefault(key, name)
    return shared


def write(output_dir: Path, state: dict[str, torch.Tensor], about: dict[str, Any]) -> Path:
    """`model.safetensors` (or `model.pt`, for shared tensors) and `model.json` in `output_dir`; the weights' path."""
    output_dir.mkdir(parents=True, exist_ok=True)
    shared = shares_storage(state)
    path = output_dir / (PICKLE_NAME if shared else SAFETENSORS_NAME)
    tmp = path.with_name(f".{path.name}.tmp")
    if shared:
        torch.save(state, tmp)
    else:
        from safetensors.torch import save_file

        save_file(state, str(tmp), metadata={"format": "pt"})
    os.replace(tmp, path)
    for stale in {SAFETENSORS_NAME, PICKLE_NAME} - {path.name}:  # a resumed run's earlier model, in the other form
        (output_dir / stale).unlink(missing_ok=True)
    meta = {
        **about,
        "file": path.name,
        "format": "torch" if shared else "safetensors",
        "sha256": _sha256(path),
        "shared_tensors": [list(pair) for pair in shared],
        "parameters": sum(t.numel() for t in state.values()),
    }
    tmp_json = output_dir / f".{JSON_NAME}.tmp"
    tmp_json.write_text(json.dumps(meta, indent=2) + "\n")
    os.replace(tmp_json, output_dir / JSON_NAME)
    return path


def save(model: nn.Module, strategy: str, rank: int, output_dir: Path, about: dict[str, Any]) -> str | None:
    """Collective under FSDP: the final model written by rank 0 (its path there; None elsewhere)."""
    state = full_state_dict(model, strategy)
    if rank != 0:
        return None
    path = write(output_dir, state, {**about, "run_uid": os.environ.get("TRAINCTL_RUN_UID")})
    log(rank, f"final model: {path} ({path.stat().st_size / 1e6:.1f} MB); {JSON_NAME} says how to rebuild it")
    return str(path)


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()

"""Reproducibility: one seed for every rank, per-rank streams, their saved states, and the switch
for deterministic kernels (`deterministic`; `auto`, the default, turns it on where it is free: CPU)
that makes a resume bit-identical.

The states are plain types and tensors (no pickled objects), so a checkpoint holding them loads
with `torch.load(weights_only=True)`.
"""

from __future__ import annotations

import os
import random
from typing import Any

import numpy as np
import torch

DETERMINISTIC_PRICE = "1.41x the step time of a 98M transformer in bf16 on an H100 (docs/benchmarks.md, GPU)"
"""What `deterministic: true` costs on a GPU, as measured; the log says it where auto turned it off."""


def deterministic_mode(setting: str, cuda: bool) -> tuple[bool, str]:
    """Whether deterministic kernels are on for `setting` (auto/true/false) on this machine, and the log's words
    for it. `auto` follows the field's convention (torchtitan, Lightning, the HF Trainer: speed by default):
    on where it is free (CPU, 0.99x kernel time: docs/benchmarks.md), off on CUDA, where it is not."""
    if setting == "auto":
        if cuda:
            return (
                False,
                f"off (auto on CUDA; deterministic: true makes a resume bit-identical at {DETERMINISTIC_PRICE})",
            )
        return True, "on (auto on CPU, where it costs nothing measurable): a resume is bit-identical"
    if setting == "true":
        return True, "on (deterministic: true): a resume is bit-identical"
    return False, "off (deterministic: false): a resume restores every state, not the float order of every kernel"


def use_deterministic(on: bool) -> None:
    """Deterministic kernels (and a cuBLAS workspace that allows them; set before the first cuBLAS
    call), or, off, cuDNN benchmarking its algorithms and non-deterministic kernels: faster, but a
    resumed run is no longer bit-identical to an uninterrupted one."""
    if on:
        os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    torch.use_deterministic_algorithms(on, warn_only=True)
    torch.backends.cudnn.benchmark = not on


def seed_everything(seed: int) -> None:
    """Seed Python, numpy and torch alike (the same seed on every rank gives the same weights)."""
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)


def rng_state() -> dict[str, Any]:
    np_state: Any = np.random.get_state()
    py_state = random.getstate()
    state: dict[str, Any] = {
        "torch": torch.get_rng_state(),
        "numpy": [np_state[0], torch.from_numpy(np.asarray(np_state[1]).astype(np.int64)), *np_state[2:]],
        "python": [py_state[0], list(py_state[1]), py_state[2]],
    }
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state()
    return state


def set_rng_state(state: dict[str, Any]) -> None:
    torch.set_rng_state(state["torch"])
    name, keys, pos, has_gauss, cached = state["numpy"]
    np.random.set_state((name, keys.numpy().astype(np.uint32), int(pos), int(has_gauss), float(cached)))
    version, internal, gauss = state["python"]
    random.setstate((version, tuple(internal), gauss))
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state(state["cuda"])

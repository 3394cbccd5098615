"""`compile: true`: the model through `torch.compile`, and what that cost, read from torch's own counters.

The anchors: nanoGPT's train.py (`model = torch.compile(model)`, then `DDP(model)`) and torchtitan's
`compile` option (compile, then wrap for data parallelism). The compiled module is a wrapper
(`OptimizedModule`) around the model, which keeps its parameters: the loop steps the wrapper (inside DDP,
or around the FSDP2-sharded model), while checkpoints and evaluation use the model itself, so saved keys
never get the wrapper's `_orig_mod.` prefix and a checkpoint loads into a run with or without `compile`.

Steady state means no recompiles: every graph is compiled in the first step (the data's shapes are
fixed). `CompileStats` reads dynamo's graph counter (`torch._dynamo.utils.counters["stats"]["unique_graphs"]`;
torch 2.13 keeps no `counters["recompiles"]`) and its compilation metrics (the seconds spent compiling),
after the first step and at the end, so the log, the first-step figure and summary.json can say both.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch import nn

from .steps import StepDone


def compile_model(model: nn.Module, backend: str = "inductor") -> nn.Module:
    """The model compiled (inductor, default mode, as nanoGPT and torchtitan), sharing its parameters and buffers."""
    compiled: Any = torch.compile(model, backend=backend)  # an OptimizedModule, typed as a callable
    assert isinstance(compiled, nn.Module)
    return compiled


def graphs_compiled() -> int:
    """Graphs dynamo has compiled in this process (a recompile adds one)."""
    from torch._dynamo.utils import counters

    return int(counters["stats"]["unique_graphs"])


def compile_seconds() -> float:
    """Seconds dynamo and its backend spent compiling frames in this process so far."""
    from torch._dynamo.utils import get_compilation_metrics

    return float(sum(m.entire_frame_compile_time_s or 0.0 for m in get_compilation_metrics()))


class CompileStats:
    """Compile time and graph counts of a run with `compile: true` (inert without it); a `StepListener`
    that logs, after this attempt's first step, how long compiling took."""

    def __init__(self, on: bool, say: Callable[[str], None]) -> None:
        self.on, self.say = on, say
        self.start_graphs = graphs_compiled() if on else 0
        self.first_graphs: int | None = None
        self.first_s: float | None = None

    def on_step(self, done: StepDone, /) -> None:
        """After the first step: note the graphs and seconds it compiled, and say them."""
        if not self.on or self.first_graphs is not None:
            return
        self.first_graphs, self.first_s = graphs_compiled(), compile_seconds()
        self.say(
            f"compiled the model in {self.first_s:.1f} s ({self.first_graphs - self.start_graphs} graphs), "
            f"in a first step of {done.timing.wall_s:.1f} s"
        )

    def summary(self) -> dict[str, Any] | None:
        """summary.json's `compile`: seconds, graphs in the first step, and recompiles after it (0 in steady state)."""
        if not self.on:
            return None
        now = graphs_compiled()
        first = self.first_graphs if self.first_graphs is not None else now
        return {
            "compile_s": round(compile_seconds(), 3),
            "first_step_graphs": first - self.start_graphs,
            "recompiles_after_first_step": now - first,
        }

"""What a completed optimizer step reports, and where its time went on this rank.

The loop hands one `StepDone` to each `StepListener` after every step (`Trainer.run`): the
metrics window today; a heartbeat, straggler timing and progress reporting plug in the same way.

`StepClock` splits a step into waiting for data, waiting for the gradient all-reduce, and the
rest, this rank's own compute: the figure to compare across ranks to find a slow one, since the
fast ranks' extra time is all waiting. DDP all-reduces gradients in buckets while backward runs
and `backward()` returns once the last bucket is reduced, so a fast rank spends the tail of its
backward waiting for the slowest. A hook on every parameter (`register_post_accumulate_grad_hook`)
stamps when this rank's last gradient was ready; from there until `backward()` returns is time in
the collective. Host clocks: on CPU they are the truth. On CUDA the stamps would say when backward's
kernels were launched, not when they ran, and a Python hook per parameter makes autograd's device
thread take the GIL each time, behind any other Python thread for up to its switch interval: so no
hooks on CUDA (`stamps_gradients`), `sync_wait_s` is 0 there and the wait is inside `compute_s`.
On CUDA nothing in a step waits for the GPU
(a per-step `float(loss)` made the GPU idle while Python launched the next forward: bench/gpu.py's
98M transformer on an H100 went from 1.07x to 1.045x the textbook loop's step time without it), so
the host runs ahead until CUDA's launch queue is full and a step's times are the host's; the metrics
window reads the loss once per line, which waits for the window's kernels, so its `step_time_s` is
the GPU's over the window. The all-reduce wait happens on the device, inside `compute_s` (CUDA
events would be needed to separate it). With FSDP, whose collectives run inside forward and
backward, `sync_wait_s` is 0 and `compute_s` includes them.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Protocol, TypeVar

import torch

T = TypeVar("T")


@dataclass(frozen=True)
class StepTiming:
    """Seconds of one optimizer step on this rank."""

    wall_s: float  # since the previous step completed: everything the loop did in between
    data_wait_s: float  # waiting for this step's micro-batches
    sync_wait_s: float  # waiting for the gradient all-reduce after this rank's last gradient was ready
    compute_s: float  # forward, backward and optimizer step, without the two waits above


@dataclass(frozen=True)
class StepDone:
    """A completed optimizer step: `step` counts from 1 and is the same on every rank."""

    step: int
    epoch: int
    loss: torch.Tensor  # this rank's loss of the step (mean over its micro-batches), not averaged over ranks:
    # 0-d, on the training device; reading it waits for the step's kernels, so listeners read it rarely
    timing: StepTiming


class StepListener(Protocol):
    def on_step(self, done: StepDone, /) -> None: ...


def stamps_gradients(strategy: str, device: torch.device) -> bool:
    """Whether `StepClock` hooks the parameters: DDP on the CPU only (see the module's docstring)."""
    return strategy == "ddp" and device.type == "cpu"


class StepClock:
    """Times the phases of `Trainer.train_step`: `start`, `next_batch` for each micro-batch, `synced`
    after the last backward, `stop` after the optimizer step; `lap` hands out the timing."""

    def __init__(self, params: Iterable[torch.nn.Parameter] | None) -> None:
        """`params`: the DDP model's parameters, to stamp when gradients are ready (None: no stamps)."""
        self._previous: float | None = None
        self._start = self._stop = self._grad_ready = 0.0
        self._data = self._sync = 0.0
        for param in params or ():
            if param.requires_grad:
                param.register_post_accumulate_grad_hook(self._stamp)

    def _stamp(self, _param: torch.Tensor) -> None:
        self._grad_ready = time.perf_counter()

    def start(self) -> None:
        self._start = time.perf_counter()
        self._data = self._sync = 0.0

    def next_batch(self, batches: Iterator[T]) -> T | None:
        """The next micro-batch (None when there is none), the wait for it counted as data wait."""
        t0 = time.perf_counter()
        batch = next(batches, None)
        self._data += time.perf_counter() - t0
        return batch

    def synced(self) -> None:
        """Call when the last micro-batch's `backward()` has returned (gradients all-reduced)."""
        now = time.perf_counter()
        self._sync = now - self._grad_ready if self._grad_ready > self._start else 0.0

    def stop(self) -> None:
        self._stop = time.perf_counter()

    def lap(self) -> StepTiming:
        """The timing of the step just stopped; the next step's wall time starts here."""
        previous, self._previous = self._previous, self._stop
        wall = self._stop - (self._start if previous is None else previous)
        compute = max(0.0, self._stop - self._start - self._data - self._sync)
        return StepTiming(wall_s=wall, data_wait_s=self._data, sync_wait_s=self._sync, compute_s=compute)

"""The stop protocol: SIGTERM/SIGUSR1/SIGINT -> every rank finishes the same step, checkpoints,
and exits EXIT_PREEMPTED.

A handler only sets a flag (`StopFlag`); `StopVote` all-reduces it at steps all ranks agreed on,
so every rank sees the same decision at the same step even when the signal reached only one of
them (Kubernetes signals PID 1, SLURM may signal every task, torchrun forwards to its workers).
"""

from __future__ import annotations

import signal
import time
from types import FrameType

import torch

from . import distributed as D

# SIGINT too: Ctrl-C reaches the workers directly *and* through torchrun's agent, so it must not
# raise KeyboardInterrupt mid-step; the agent still kills workers that have not exited in 30 s.
HANDLED = (signal.SIGTERM, signal.SIGUSR1, signal.SIGINT)

STOP_CHECK_S = 0.5
"""Seconds of training between two all-reduces of the stop flag (signal-triggered checkpoints)."""


class StopFlag:
    def __init__(self) -> None:
        self.signal: int | None = None

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        if self.signal is None:
            self.signal = signum

    def install(self) -> None:
        for sig in HANDLED:
            signal.signal(sig, self._handle)

    @property
    def requested(self) -> bool:
        return self.signal is not None

    def name(self) -> str:
        return signal.Signals(self.signal).name if self.signal is not None else ""


class StopVote:
    """All-reduce the stop flag about every STOP_CHECK_S of training, and with it agree on the step
    of the next vote: each rank proposes about STOP_CHECK_S of steps (1 to 100) and the fewest
    wins, so every rank votes, and stops, at the same step. One collective per step cost 10% of a
    small model's step time (docs/benchmarks.md); a signal now waits at most ~STOP_CHECK_S more."""

    def __init__(self, flag: StopFlag, device: torch.device, step: int) -> None:
        self.flag, self.device = flag, device
        self.next_vote = step + 1
        self.last = (step, time.perf_counter())

    def agreed(self, step: int, final: bool) -> bool:
        """Whether every rank stops after `step`. Collective at the agreed steps and the `final` one."""
        if step < self.next_vote and not final:
            return False
        now = time.perf_counter()
        step_s = (now - self.last[1]) / max(1, step - self.last[0])
        propose = max(1, min(100, int(STOP_CHECK_S / step_s))) if step_s > 0 else 1
        flag, neg_every = D.all_reduce_max([1.0 if self.flag.requested else 0.0, -float(propose)], self.device)
        self.next_vote, self.last = step + int(-neg_every), (step, now)
        return flag > 0

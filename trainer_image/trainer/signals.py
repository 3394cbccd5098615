"""SIGTERM/SIGUSR1/SIGINT -> finish the step, checkpoint, exit EXIT_PREEMPTED.

A handler only sets a flag; the loop all-reduces it once per step, so every rank sees the same
decision at the same step even when the signal reached only one of them (Kubernetes signals
PID 1, SLURM may signal every task, torchrun forwards to its workers).
"""

from __future__ import annotations

import signal
from types import FrameType

# SIGINT too: Ctrl-C reaches the workers directly *and* through torchrun's agent, so it must not
# raise KeyboardInterrupt mid-step; the agent still kills workers that have not exited in 30 s.
HANDLED = (signal.SIGTERM, signal.SIGUSR1, signal.SIGINT)


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

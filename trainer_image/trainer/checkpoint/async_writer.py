"""One background checkpoint write at a time (`checkpoint_async: true`).

The step loop hands over a state already copied off the training tensors (`checkpoint.snapshot`)
and goes on training; the thread writes, fsyncs, verifies and publishes it (`checkpoint.write`).
A second save first waits for the one in flight, so there is never more than one copy of the
state in memory beside the model, nor two writers racing on `latest`. The thread is not a
daemon: an interpreter that exits (after an error elsewhere, or SIGTERM's checkpoint) finishes
the write first; a process killed outright leaves a `.tmp-*` directory that resume ignores.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from pathlib import Path


class CheckpointWriteError(RuntimeError):
    """A background checkpoint write failed; raised in the step loop at the next save or wait."""


class BackgroundWriter:
    def __init__(self, on_done: Callable[[Path, float], None]) -> None:
        self._thread: threading.Thread | None = None
        self._error: BaseException | None = None
        self._on_done = on_done

    @property
    def in_flight(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def submit(self, write: Callable[[], Path]) -> None:
        """Start `write` in the background, after the previous one (at most one in flight)."""
        self.wait()

        def run() -> None:
            t0 = time.perf_counter()
            try:
                path = write()
            except BaseException as exc:  # surfaced in the step loop by wait()
                self._error = exc
                return
            self._on_done(path, time.perf_counter() - t0)

        self._thread = threading.Thread(target=run, name="checkpoint-writer")
        self._thread.start()

    def wait(self) -> None:
        """Block until the write in flight is published; raise if it failed."""
        if self._thread is not None:
            self._thread.join()
            self._thread = None
        if self._error is not None:
            error, self._error = self._error, None
            raise CheckpointWriteError(
                f"background checkpoint write failed: {type(error).__name__}: {error}"
            ) from error

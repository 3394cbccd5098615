"""A run that outlives the CLI: one folder, one detached runner, the same files on every local workload.

The local target (a process tree, or one container) and SageMaker's local mode (a container per host)
both start a runner (`python -m RUNNER RUN_DIR`, a session of its own) that starts the workload, stops
it on cancel or at its time limit, and records how it ended. Both keep the same files in the run folder,
and read them the same way:

    runner.json   the runner's pid and start time, written first thing by the runner
    state.json    written when the workload starts running (attempt facts ride along)
    cancel        touched by `trainctl cancel` before it signals anything
    exit.json     the outcome ({"state": succeeded|failed|cancelled, "reason": ...}), written last

`RunFolder.phase` is how a run reads from outside: QUEUED until state.json, RUNNING while the runner
lives, ENDED once exit.json exists, LOST when the runner died without writing it. `follow` tails the
run's log files, one or one per host, line by line until the run has ended and every file is drained.
"""

from __future__ import annotations

import enum
import os
import signal
import subprocess
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from types import FrameType
from typing import IO, Any

from .processes import alive, read_json, start_detached, write_json

RUNNER, STATE, EXIT, CANCEL = "runner.json", "state.json", "exit.json", "cancel"
STARTING_S = 10.0
"""How long a run whose runner has not written runner.json yet still counts as starting, not lost."""


# Runners started by this process, by folder: polled (so they do not linger as zombies in a long-lived notebook)
# and trusted while unreaped.
_STARTED: dict[Path, subprocess.Popen[bytes]] = {}


class Phase(enum.Enum):
    QUEUED = "queued"
    RUNNING = "running"
    ENDED = "ended"
    LOST = "lost"


@dataclass(frozen=True)
class RunFolder:
    """A detached run's folder, and the module of the runner that owns it (its command line names it)."""

    path: Path
    runner: str

    def start(self) -> subprocess.Popen[bytes]:
        """Start the runner in a session of its own; its stderr goes to runner.err."""
        child = start_detached(self.runner, self.path)
        _STARTED[self.path] = child
        return child

    def runner_pid(self, recorded: int | None = None) -> int | None:
        """The pid in runner.json, else the one the submitter recorded from Popen."""
        pid = (read_json(self.path / RUNNER) or {}).get("pid") or recorded
        return int(pid) if pid else None

    def runner_alive(self, recorded: int | None = None) -> bool:
        """A runner this process started is alive until it is reaped: its pid cannot be reused before that, so it
        needs no command-line check, which can fail while the runner is still starting (one CI run's `submit
        --wait` ended its follow at once and printed none of a live run's log). Any other: pid and command line."""
        child = _STARTED.get(self.path)
        if child is not None:
            if child.poll() is None:
                return True
            _STARTED.pop(self.path, None)
            return False
        pid = self.runner_pid(recorded)
        return pid is not None and alive(pid, must_contain=self.runner)

    def reap(self, timeout_s: float) -> None:
        """Wait for a runner this process started (after a cancel), so it does not linger as a zombie."""
        child = _STARTED.pop(self.path, None)
        if child is not None:
            child.wait(timeout_s)

    def outcome(self) -> dict[str, Any] | None:
        found = read_json(self.path / EXIT)
        return found if isinstance(found, dict) else None

    def started(self) -> dict[str, Any] | None:
        found = read_json(self.path / STATE)
        return found if isinstance(found, dict) and found.get("state") == "running" else None

    def phase(self, created_at: float, runner_alive: bool) -> Phase:
        """Where the run stands; `runner_alive` is the caller's check (it may know more, e.g. a reaped child)."""
        if (self.path / EXIT).exists():
            return Phase.ENDED
        if runner_alive:
            return Phase.RUNNING if self.started() else Phase.QUEUED
        if (self.path / EXIT).exists():  # it ended between the two checks
            return Phase.ENDED
        if not (self.path / RUNNER).exists() and time.time() - created_at < STARTING_S:
            return Phase.QUEUED
        return Phase.LOST

    def ended(self, runner_alive: Callable[[], bool]) -> bool:
        return (self.path / EXIT).exists() or not runner_alive()

    # what `trainctl cancel` does first, and what the runner checks
    def request_cancel(self) -> None:
        (self.path / CANCEL).touch()

    @property
    def cancel_requested(self) -> bool:
        return (self.path / CANCEL).exists()

    # the runner's side
    def announce(self) -> float:
        """runner.json: this process runs the run; returns the start time."""
        now = time.time()
        write_json(self.path / RUNNER, {"pid": os.getpid(), "started_at": now})
        return now

    def mark_running(self, **facts: Any) -> None:
        write_json(self.path / STATE, {"state": "running", "started_at": time.time(), **facts})

    def record(self, outcome: dict[str, Any]) -> None:
        """exit.json, with the time it was written; the last file a runner writes."""
        write_json(self.path / EXIT, {**outcome, "finished_at": time.time()})


class StopSignals:
    """The runner's handlers for SIGTERM, SIGINT and SIGHUP: they only note the signal, the runner's loop
    acts on it (stops the workload with its grace) so the outcome is always recorded."""

    def __init__(self) -> None:
        self.received: list[int] = []
        for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
            signal.signal(sig, self._note)

    def _note(self, signum: int, _frame: FrameType | None) -> None:
        self.received.append(signum)

    def __bool__(self) -> bool:
        return bool(self.received)


def follow(
    files: Mapping[str, Path], ended: Callable[[], bool], follow: bool, poll_s: float = 0.2
) -> Iterator[tuple[str, str]]:
    """(key, line) for every whole line of each file, in the order read; with `follow`, until `ended()` and
    every file drained. A file that does not exist yet is picked up when it appears; a last line without
    its newline comes at the end."""
    handles: dict[str, IO[bytes]] = {}
    pending = dict.fromkeys(files, b"")
    try:
        while True:
            finished = ended()  # before reading: whatever was written before the end is read below
            for key, path in files.items():
                if key not in handles and path.exists():
                    handles[key] = open(path, "rb")  # noqa: SIM115 - closed in finally
                if key in handles:
                    pending[key] += handles[key].read()
                    *lines, pending[key] = pending[key].split(b"\n")
                    for line in lines:
                        yield key, line.decode("utf-8", "replace")
            if not follow or finished:
                break
            time.sleep(poll_s)
        for key, rest in pending.items():
            if rest:
                yield key, rest.decode("utf-8", "replace")
    finally:
        for fh in handles.values():
            fh.close()

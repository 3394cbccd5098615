"""The workers' output, read by the launcher line by line per rank, and what it can tell about a hang.

Workers used to inherit the launcher's stdout and stderr, so two ranks' partial writes could end up
in one line of the log, and a user's program got no rank prefix. Now torchrun gives each worker a
pipe of its own for each stream: `WorkerOutput` is a torchrun `LogsSpecs` (torchrun's extension
point for where a worker's output goes: the `torchrun.logs_specs` entry point, `--logs-specs
trainctl`; torch/distributed/elastic/multiprocessing/api.py), whose `reify` points every local
rank's stdout and stderr at a FIFO and starts a reader thread on each. A reader passes on whole
lines only, each written at once under one lock, with `[rank<N>] ` in front unless the line already
starts with it (the built-in trainer's own prefix); a line longer than 64 KiB is cut there.
Each line is also shown to the `Lines` watcher the launcher installed (`QuietWatch` for a `command:`
job's `hang:` rule). Between a rank's stdout and stderr the order is kept only within each stream.
The last lines of each rank (`TAILS`) and when its output ended (`ENDED`) name a failure's rank and
its last words (first_failure.py).
"""

from __future__ import annotations

import collections
import contextlib
import os
import re
import sys
import threading
import time
from pathlib import Path
from typing import Protocol

from torch.distributed.elastic.multiprocessing.api import DefaultLogsSpecs, LogsDest

from . import failpoints

NAME = "trainctl"
"""The entry point's name under `torchrun.logs_specs` (trainer_image/pyproject.toml)."""
MAX_LINE = 64 * 1024


class Lines(Protocol):
    def attempt(self, ranks: list[int]) -> None: ...
    def line(self, rank: int, text: str) -> None: ...


class _Nobody:
    def attempt(self, ranks: list[int]) -> None:
        pass

    def line(self, rank: int, text: str) -> None:
        pass


WATCHER: Lines = _Nobody()
"""Set by the launcher before torchrun starts (the class is built by torchrun from its argv)."""
_LOCK = threading.Lock()
_READERS: list[threading.Thread] = []
TAIL_LINES = 20
_PREFIX = re.compile(r"^\[rank\d+\]:? ")  # the built-in trainer's, and torch's own excepthook's (`[rank1]: `)
TAILS: dict[int, collections.deque[str]] = {}
"""Each rank's last lines (both streams, without the rank prefix), this attempt's."""
ENDED: dict[int, float] = {}
"""When each rank's output ended (both streams closed: the worker is gone), Unix time."""


def available() -> bool:
    """Whether torchrun can find `WorkerOutput` (its entry point is installed with this package)."""
    from importlib.metadata import entry_points

    return any(
        ep.value == f"{__name__}:{WorkerOutput.__name__}" for ep in entry_points(group="torchrun.logs_specs", name=NAME)
    )


def emit(rank: int, raw: bytes, err: bool) -> None:
    """One whole line to the launcher's stdout or stderr, with the rank prefix."""
    if failpoints.ACTIVE:
        failpoints.hit("launcher-output")
    prefix = f"[rank{rank}]".encode()
    text = raw.rstrip(b"\r")
    line = text if text.startswith(prefix) else prefix + b" " + text
    stream = sys.stderr if err else sys.stdout
    words = text.decode("utf-8", "replace")
    with _LOCK:
        stream.buffer.write(line + b"\n")
        stream.flush()
        TAILS.setdefault(rank, collections.deque(maxlen=TAIL_LINES)).append(_PREFIX.sub("", words, count=1))
    WATCHER.line(rank, words)


def pump(fifo: Path, rank: int, err: bool) -> None:
    """Read one worker stream to its end (every writer closed), passing on whole lines."""
    with open(fifo, "rb", buffering=0) as fh:  # blocks until torchrun opens the writing end
        pending = b""
        while chunk := fh.read(65536):
            pending += chunk
            *lines, pending = pending.split(b"\n")
            for line in lines:
                emit(rank, line, err)
            while len(pending) >= MAX_LINE:
                emit(rank, pending[:MAX_LINE], err)
                pending = pending[MAX_LINE:]
        if pending:
            emit(rank, pending, err)
    with _LOCK:
        ENDED[rank] = time.time()
    with contextlib.suppress(OSError):
        fifo.unlink()


def drain(timeout_s: float = 5.0) -> None:
    """Wait (at most `timeout_s` in all) for the readers of finished workers to pass on their last lines."""
    deadline = time.monotonic() + timeout_s
    for thread in list(_READERS):
        thread.join(timeout=max(0.0, deadline - time.monotonic()))
    _READERS[:] = [t for t in _READERS if t.is_alive()]


class WorkerOutput(DefaultLogsSpecs):
    """torchrun's `DefaultLogsSpecs` (its error files, its folders per attempt), with every worker's
    stdout and stderr on a FIFO that a reader thread here turns into prefixed lines."""

    def reify(self, envs: dict[int, dict[str, str]]) -> LogsDest:
        dest = super().reify(envs)
        ranks: list[int] = []
        TAILS.clear()  # a restart's workers: this attempt's lines only
        ENDED.clear()
        for local_rank, env in sorted(envs.items()):
            rank = int(env.get("RANK", local_rank))
            ranks.append(rank)
            folder = Path(dest.error_files[local_rank]).parent if dest.error_files.get(local_rank) else None
            if folder is None or str(folder) == os.devnull:
                continue  # no place for FIFOs: the worker keeps the launcher's streams
            for err, streams in ((False, dest.stdouts), (True, dest.stderrs)):
                fifo = folder / ("stderr.fifo" if err else "stdout.fifo")
                os.mkfifo(fifo, 0o600)
                streams[local_rank] = str(fifo)
                reader = threading.Thread(target=pump, args=(fifo, rank, err), name=f"output-rank{rank}", daemon=True)
                reader.start()
                _READERS.append(reader)
        WATCHER.attempt(ranks)
        return dest

"""Small process and file helpers for the local target: liveness, process trees from /proc, atomic JSON.

torchrun starts its workers in new sessions, so a process group alone does not reach them;
the tree of parent links (and the runner being a child subreaper) does.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

PROC = Path("/proc")


def _stat(pid: int) -> tuple[str, int] | None:
    """(state letter, parent pid) from /proc/PID/stat, or None if gone or unreadable."""
    try:
        text = (PROC / str(pid) / "stat").read_text()
    except OSError:
        return None
    fields = text[text.rfind(")") + 2 :].split()
    return fields[0], int(fields[1])


def alive(pid: int, must_contain: str | None = None) -> bool:
    """True if the process exists and is not a zombie (and its cmdline contains `must_contain`)."""
    if PROC.is_dir():
        stat = _stat(pid)
        if stat is None or stat[0] in ("Z", "X"):
            return False
        if must_contain is not None:
            try:
                cmdline = (PROC / str(pid) / "cmdline").read_bytes()
            except OSError:
                return False
            return must_contain.encode() in cmdline
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def descendants(root: int) -> list[int]:
    """Every live descendant of `root` (children first-level first), from the /proc parent links."""
    children: dict[int, list[int]] = {}
    for entry in PROC.iterdir() if PROC.is_dir() else ():
        if entry.name.isdigit():
            stat = _stat(int(entry.name))
            if stat is not None and stat[0] not in ("Z", "X"):
                children.setdefault(stat[1], []).append(int(entry.name))
    found: list[int] = []
    queue = [root]
    while queue:
        for child in children.get(queue.pop(0), []):
            if child not in found:
                found.append(child)
                queue.append(child)
    return found


def kill_all(pids: list[int], sig: int) -> None:
    for pid in pids:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, sig)


def terminate_tree(pids: list[int], grace_s: float) -> None:
    """SIGTERM, wait up to grace_s for them to go, SIGKILL the rest."""
    kill_all(pids, signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline and any(alive(p) for p in pids):
        time.sleep(0.1)
    kill_all([p for p in pids if alive(p)], signal.SIGKILL)


def read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def write_json(path: Path, data: Any) -> None:
    """Atomic, owner-only: readers see the old file or the whole new one."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as fh:
        json.dump(data, fh, indent=2, sort_keys=True)
        fh.write("\n")
    os.replace(tmp, path)


def start_detached(module: str, run_dir: Path) -> subprocess.Popen[bytes]:
    """`python -m MODULE RUN_DIR` in a new session, so the run outlives the CLI; its stderr goes to
    RUN_DIR/runner.err. An OSError (no such interpreter, no memory) is the caller's to word."""
    with open(run_dir / "runner.err", "wb") as err:
        return subprocess.Popen(
            [sys.executable, "-m", module, str(run_dir)],
            cwd=run_dir,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=err,
            start_new_session=True,
            close_fds=True,
        )

"""Process and file helpers for runs on this machine (the local target, SageMaker's local mode, sweeps):
liveness, a run's processes (psutil), atomic JSON.

torchrun starts its workers in new sessions, so a process group alone does not reach them; and a
worker whose parent died is re-parented to init (or to a subreaper), so parent links alone do not
either. A run's processes are found both ways: the recorded job process and its descendants, and
every process whose environment carries the run's `TRAINCTL_RUN_DIR` (the runner sets it for the
job; every descendant inherits it, wherever it was re-parented to).
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

import psutil

RUN_DIR_ENV = "TRAINCTL_RUN_DIR"
"""Set by the runner for the job: every process of the run carries it (docs/your-program.md)."""


def _live(proc: psutil.Process) -> bool:
    try:
        return proc.status() not in (psutil.STATUS_ZOMBIE, psutil.STATUS_DEAD)
    except (psutil.NoSuchProcess, psutil.AccessDenied):
        return False


def alive(pid: int, must_contain: str | None = None) -> bool:
    """True if the process exists and is not a zombie (and its command line contains `must_contain`)."""
    try:
        proc = psutil.Process(pid)
        if not _live(proc):
            return False
        return must_contain is None or must_contain in " ".join(proc.cmdline())
    except (psutil.NoSuchProcess, psutil.ZombieProcess):
        return False
    except psutil.AccessDenied:
        return must_contain is None


def process_started(pid: int) -> float | None:
    """The process's start time (seconds since the epoch), which tells it from a later one with its pid."""
    try:
        return float(psutil.Process(pid).create_time())
    except psutil.Error:
        return None


def descendants(root: int) -> list[int]:
    """Every live descendant of `root`, nearest first."""
    try:
        children = psutil.Process(root).children(recursive=True)
    except psutil.Error:
        return []
    return [p.pid for p in children if _live(p)]


def run_processes(run_dir: Path, job: dict[str, Any] | None) -> list[psutil.Process]:
    """The live processes of a local run: the job process the runner recorded (`job.pid`: pid and start
    time, so a reused pid is not taken for it) and its descendants, and every process whose environment
    has `TRAINCTL_RUN_DIR=run_dir`. Not the runner itself (it does not carry the variable)."""
    found: dict[int, psutil.Process] = {}
    if job and job.get("pid"):
        with contextlib.suppress(psutil.Error):
            proc = psutil.Process(int(job["pid"]))
            if job.get("started") is None or abs(proc.create_time() - float(job["started"])) < 1.0:
                for p in [proc, *proc.children(recursive=True)]:
                    found[p.pid] = p
    wanted = str(run_dir)
    for proc in psutil.process_iter(["environ"], ad_value=None):
        env = proc.info.get("environ") or {}
        if env.get(RUN_DIR_ENV) == wanted and proc.pid != os.getpid():
            found.setdefault(proc.pid, proc)
    return [p for p in sorted(found.values(), key=lambda p: p.pid) if _live(p)]


def process_lines(procs: list[psutil.Process]) -> list[str]:
    """`pid 123 (python -m trainer.train ...)` for each process, for status and cancel messages."""
    out = []
    for proc in procs:
        try:
            words = " ".join(proc.cmdline())[:100] or proc.name()
        except psutil.Error:
            words = "gone"
        out.append(f"pid {proc.pid} ({words})")
    return out


def may_signal(pid: int) -> bool:
    """Whether this process may signal `pid` (kill(2) with signal 0 checks the permission alone): another user's
    process, without CAP_KILL, cannot be stopped from here, so waiting for it to go is in vain."""
    try:
        os.kill(pid, 0)
    except PermissionError:
        return False
    except ProcessLookupError:
        pass
    return True


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
        json.dump(data, fh, indent=2)  # keys in their order: a sweep trial's parameters read as given
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

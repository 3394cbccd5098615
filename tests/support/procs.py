"""What the tests ask about this machine's processes, through psutil (as the SDK's own
trainctl.targets.processes does): the trainer image keeps its few /proc reads (trainer/launcher/quiet.py)
because it does not ship psutil."""

from __future__ import annotations

import os

import psutil

GONE = (psutil.STATUS_ZOMBIE, psutil.STATUS_DEAD)


def cmdline(pid: int) -> str:
    """The process's command line, words joined by spaces ("" once it is gone)."""
    try:
        return " ".join(psutil.Process(pid).cmdline())
    except psutil.Error:
        return ""


def stopped(pid: int) -> bool:
    """Stopped by a signal (SIGSTOP, SIGTSTP): state T."""
    try:
        return psutil.Process(pid).status() == psutil.STATUS_STOPPED
    except psutil.Error:
        return False


def state(pid: int) -> str:
    """psutil's name of the process's state ("running", "sleeping", "stopped"...; "gone" once it is)."""
    try:
        return str(psutil.Process(pid).status())
    except psutil.Error:
        return "gone"


def mentioning(text: str) -> list[tuple[int, str]]:
    """Live processes (not zombies, not this one) whose command line contains `text`: (pid, command line)."""
    found = []
    for proc in psutil.process_iter(["cmdline", "status"], ad_value=None):
        line = " ".join(proc.info["cmdline"] or [])
        if proc.pid != os.getpid() and text in line and proc.info["status"] not in GONE:
            found.append((proc.pid, line))
    return found


def group_alive(pgid: int) -> bool:
    """Whether the process group has a live member (a group of zombies still answers killpg)."""
    for proc in psutil.process_iter(["status"], ad_value=None):
        try:
            if os.getpgid(proc.pid) == pgid and proc.info["status"] not in GONE:
                return True
        except OSError:
            continue
    return False


def with_env(name: str, value: str) -> list[int]:
    """Live processes whose environment has name=value (every process a SLURM node or a run started)."""
    found = []
    for proc in psutil.process_iter(["environ", "status"], ad_value=None):
        if (proc.info["environ"] or {}).get(name) == value and proc.info["status"] not in GONE:
            found.append(proc.pid)
    return found

"""What the suite costs, and a little less of it: the seconds, CPU seconds and wall span of each test folder, printed
at the end (CI's log shows where its minutes go), and the collector's walks over what collection built, skipped.
Registered by tests/conftest.py `pytest_configure`, in the controller and in each xdist worker.

With TRAINCTL_TEST_COST_LOG=FILE the controller also appends one JSON line per test phase (node id, phase, start,
stop, CPU seconds, the pid of the worker that ran it): scripts/cost_by_test.py joins it with the kernel's process
accounting to name the tests whose processes, detached ones and SLURM's jobs included, used the most CPU."""

from __future__ import annotations

import gc
import json
import os
import resource
from collections.abc import Iterator
from pathlib import Path

import pytest

_DIR_SECONDS: dict[str, float] = {}
_DIR_CPU: dict[str, float] = {}
_DIR_SPAN: dict[str, tuple[float, float]] = {}
_CPU_MARK: list[float] = []


def _machine_cpu() -> tuple[float, float]:
    """(busy, total) jiffies of every core since boot (/proc/stat's `cpu` line; iowait and idle are not busy)."""
    try:
        fields = [float(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    except (OSError, ValueError):
        return 0.0, 0.0
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0.0)
    return sum(fields) - idle, sum(fields)


_MACHINE_START: list[tuple[float, float]] = []


def pytest_sessionstart(session: pytest.Session) -> None:
    _MACHINE_START[:] = [_machine_cpu()]


def _cpu_seconds() -> float:
    """CPU seconds (user + system) of this process and of every child it has waited for, theirs included."""
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def pytest_runtest_logstart(nodeid: str, location: tuple[str, int | None, str]) -> None:
    _CPU_MARK[:] = [_cpu_seconds()]


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[pytest.TestReport]:
    """Each phase's report carries the CPU seconds it took in the process that ran it (`cpu_s`), its waited-for
    subprocesses included; daemons it has not reaped yet (an API server, slurmd's jobs, podman's containers) are
    not counted. Under xdist the report travels to the controller with it."""
    report = yield
    now = _cpu_seconds()
    report.cpu_s = now - _CPU_MARK[0] if _CPU_MARK else 0.0  # type: ignore[attr-defined]
    report.worker_pid = os.getpid()  # type: ignore[attr-defined]
    _CPU_MARK[:] = [now]
    return report


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    """Sum each test's setup, call and teardown seconds (and CPU seconds) under its folder (tests/<folder>/...),
    and keep when the folder's first phase started and its last ended. Under xdist this runs in the controller,
    once per report any worker sends (the reports carry their start and stop times and CPU seconds)."""
    parts = report.nodeid.split("::")[0].split("/")
    folder = "/".join(parts[:2]) if len(parts) > 2 else parts[0]
    _DIR_SECONDS[folder] = _DIR_SECONDS.get(folder, 0.0) + report.duration
    _DIR_CPU[folder] = _DIR_CPU.get(folder, 0.0) + float(getattr(report, "cpu_s", 0.0) or 0.0)
    start, stop = getattr(report, "start", None), getattr(report, "stop", None)
    if start is not None and stop is not None:
        first, last = _DIR_SPAN.get(folder, (start, stop))
        _DIR_SPAN[folder] = (min(first, start), max(last, stop))
        log = os.environ.get("TRAINCTL_TEST_COST_LOG")
        if log and "PYTEST_XDIST_WORKER" not in os.environ:  # the controller writes what every worker reports
            line = {"nodeid": report.nodeid, "when": report.when, "start": start, "stop": stop,
                    "cpu_s": getattr(report, "cpu_s", None), "pid": getattr(report, "worker_pid", None)}  # fmt: skip
            with open(log, "a") as f:
                f.write(json.dumps(line) + "\n")


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    """The time each test folder took, largest first: where CI's minutes go. Seconds are the tests' own (summed
    over the xdist workers); cpu is the CPU seconds its tests' processes used (the worker and the subprocesses it
    waited for: not a detached local run's supervisor, SLURM's jobs, an API server or containers); the span is wall
    time from the folder's first test to its last, other folders' tests running beside it. The last line is how
    busy the machine's cores were over the session."""
    if not _DIR_SECONDS:
        return
    terminalreporter.section("seconds by test folder")
    terminalreporter.write_line(f"{'seconds':>8}  {'cpu':>8}  {'span':>8}  folder")
    for folder, seconds in sorted(_DIR_SECONDS.items(), key=lambda kv: -kv[1]):
        first, last = _DIR_SPAN.get(folder, (0.0, 0.0))
        terminalreporter.write_line(f"{seconds:8.1f}  {_DIR_CPU.get(folder, 0.0):8.1f}  {last - first:8.1f}  {folder}")
    spans = _DIR_SPAN.values()
    wall = max(last for _, last in spans) - min(first for first, _ in spans) if spans else 0.0
    total_cpu = sum(_DIR_CPU.values())
    terminalreporter.write_line(f"{sum(_DIR_SECONDS.values()):8.1f}  {total_cpu:8.1f}  {wall:8.1f}  all")
    if _MACHINE_START and (cores := os.cpu_count()):
        (busy0, total0), (busy1, total1) = _MACHINE_START[0], _machine_cpu()
        if total1 > total0:
            share = (busy1 - busy0) / (total1 - total0)
            # every process counts here (detached local runs, SLURM's jobs, containers, other users): near 100 %,
            # more workers cannot help, only less CPU work
            terminalreporter.write_line(f"machine: {share:.0%} of its {cores} cores busy over the session (/proc/stat)")


def pytest_collection_finish(session: pytest.Session) -> None:
    """Freeze what collection built (torch, the SDK, every test module) into the permanent generation, so the
    tests' own garbage collections stop walking it again and again (the trainer does the same at its start:
    trainer_image/trainer/gc_pause.py)."""
    gc.freeze()

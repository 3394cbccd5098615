"""Benchmark: what `Job.with_function` adds on the local target, from `submit` to the value back in the caller.

A trivial function (`return 1`) submitted with `with_function` and read back with `run.result()`, against the same
program as a `command:` job (`python -c "x = 1"`) submitted and waited for with `run.wait()`; one process each,
the same poll interval, repetitions interleaved (A B A B ...). The difference is pickling, packing the payload
into a bundle, the launcher's checks, loading cloudpickle in the worker, writing and reading the result.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable

from .common import WORK, Figure, figure, interleaved

NAME = "function"
POLL_S = 0.05


def trivial() -> int:
    return 1


def _timed(submit_and_wait: Callable[[], object]) -> Callable[[], float]:
    def once() -> float:
        t0 = time.perf_counter()
        submit_and_wait()
        return time.perf_counter() - t0

    return once


def run(quick: bool = False) -> list[Figure]:
    import cloudpickle
    from trainctl import Job

    os.environ["TRAINCTL_HOME"] = str(WORK / "function-home")
    cloudpickle.register_pickle_by_value(sys.modules[__name__])  # bench/ does not travel: send it by value
    base = Job(name="bench-fn", resources={"procs_per_node": 1})
    command = Job(name="bench-cmd", command=["python", "-c", "x = 1"], resources={"procs_per_node": 1})

    def by_function() -> object:
        value = base.with_function(trivial).submit(target="local").result(timeout=120, poll=POLL_S)
        assert value == 1
        return value

    def by_command() -> object:
        return command.submit(target="local").wait(timeout=120, poll=POLL_S, check=True)

    times = interleaved({"function": _timed(by_function), "command": _timed(by_command)},
                        reps=1 if quick else 7, warmup=0 if quick else 1)  # fmt: skip
    added = [f - c for f, c in zip(times["function"], times["command"], strict=True)]
    return [
        figure(NAME, "function: submit -> result added over a command: job (local, 1 process)", added,
               unit="s", target="< 0.3", note="paired repetitions, interleaved"),
        figure(NAME, "function: submit -> result (local, trivial function)", times["function"], unit="s"),
        figure(NAME, "command: job: submit -> end (the same program)", times["command"], unit="s"),
    ]  # fmt: skip

"""Leaving a finished process without the interpreter's teardown.

A process that imported torch holds some 2,000 modules (torch, its compiler stack, sympy, numpy);
Python tears each down at exit, 0.7 s of a CPU core for a digits worker (measured after `main`
returned), and the operating system frees all of it anyway. Every job pays it once per worker and
once per launcher, at the end of every attempt. Once `main` has returned and no non-daemon thread is
left, the exit handlers run (logging, torch's, a tracker's), the standard streams are flushed, and
the process leaves with `os._exit`: what a normal exit would have done, minus the teardown.
"""

from __future__ import annotations

import atexit
import os
import sys
import threading
from typing import NoReturn


def exit_now(code: int) -> NoReturn:
    """Flush the standard streams and leave at once: no exit handlers, no teardown (also for a failed
    worker, whose process group was not shut down collectively and can abort at exit, turning a clear
    exit code into SIGABRT)."""
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def exit_without_teardown(code: int) -> NoReturn:
    """`sys.exit(code)`, skipping module teardown; a normal exit while a non-daemon thread still runs
    (Python's exit waits for it; so does this)."""
    main = threading.main_thread()
    if any(t is not main and t.is_alive() and not t.daemon for t in threading.enumerate()):
        sys.exit(code)
    atexit._run_exitfuncs()
    exit_now(code)

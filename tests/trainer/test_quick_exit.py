"""`quick_exit.exit_without_teardown`: the exit code, the exit handlers and buffered output of a normal
exit, without module teardown; a non-daemon thread still running gets the normal exit, which waits for it."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

PROGRAM = """
import atexit, sys, threading, time
from trainer.quick_exit import exit_without_teardown

class Torn:
    def __del__(self):
        print("module torn down", flush=True)

KEPT = Torn()  # a module global: collected only by the interpreter's teardown
atexit.register(lambda: print("exit handler ran"))
if sys.argv[1] == "thread":
    threading.Thread(target=lambda: (time.sleep(0.3), print("thread finished"))).start()
sys.stdout.write("buffered, no newline")
exit_without_teardown(7)
"""


def _run(tmp_path: Path, mode: str) -> subprocess.CompletedProcess[str]:
    script = tmp_path / "program.py"
    script.write_text(PROGRAM)
    return subprocess.run([sys.executable, str(script), mode], capture_output=True, text=True, timeout=60)


def test_the_exit_handlers_and_the_output_survive_and_the_teardown_is_skipped(tmp_path: Path) -> None:
    done = _run(tmp_path, "alone")
    assert done.returncode == 7, done.stderr
    assert done.stdout.startswith("buffered, no newline") and "exit handler ran" in done.stdout, done.stdout
    assert "module torn down" not in done.stdout, done.stdout


def test_a_running_thread_gets_the_normal_exit(tmp_path: Path) -> None:
    done = _run(tmp_path, "thread")
    assert done.returncode == 7, done.stderr
    assert "thread finished" in done.stdout and "exit handler ran" in done.stdout, done.stdout
    assert "module torn down" in done.stdout, done.stdout

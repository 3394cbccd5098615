"""Run a command with a pseudo-terminal as its stdout/stderr, as a person at a terminal would.

The trainer shows its progress bar only when stderr is a terminal; a pipe would turn it off
and flatter the trainer. The output is drained continuously, so a full buffer never stalls it.
"""

from __future__ import annotations

import fcntl
import os
import select
import struct
import subprocess
import termios
import time
from collections.abc import Sequence
from pathlib import Path


def run_in_pty(argv: Sequence[str], env: dict[str, str], cwd: Path, timeout: float) -> tuple[int, str]:
    """(exit code, everything the command wrote). Raises TimeoutError past `timeout` seconds."""
    master, slave = os.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 120, 0, 0))
    proc = subprocess.Popen(
        list(argv), stdin=subprocess.DEVNULL, stdout=slave, stderr=slave, env=env, cwd=cwd, start_new_session=True
    )
    os.close(slave)
    chunks: list[bytes] = []
    deadline = time.monotonic() + timeout
    try:
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                os.killpg(proc.pid, 9)
                raise TimeoutError(f"{' '.join(argv)} ran past {timeout} s")
            ready, _, _ = select.select([master], [], [], min(left, 1.0))
            if not ready:
                if proc.poll() is not None:
                    break
                continue
            try:
                data = os.read(master, 65536)
            except OSError:  # EIO: every writer has closed the terminal
                break
            if not data:
                break
            chunks.append(data)
        code = proc.wait(timeout=max(1.0, deadline - time.monotonic()))
    finally:
        os.close(master)
    return code, b"".join(chunks).decode("utf-8", "replace")

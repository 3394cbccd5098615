"""`trainctl ...` as a user runs it, in a fresh process: the one helper for every test that needs the real CLI's
exit code, output and environment (tests of the CLI's own parsing run it in process, with typer's CliRunner)."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path

TRAINCTL = [sys.executable, "-m", "trainctl"]


def trainctl(
    *args: str, timeout: float = 600, cwd: Path | str | None = None, env: Mapping[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """Run it to the end, with this process's environment unless `env` is given; nothing on its stdin (a
    command that would ask, `prune`, reads none)."""
    return subprocess.run(
        [*TRAINCTL, *args], capture_output=True, text=True, timeout=timeout, cwd=cwd, env=env, stdin=subprocess.DEVNULL
    )

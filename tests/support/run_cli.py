"""`trainctl ...` in a test: the one place tests start the CLI.

- `trainctl(...)`: as a user runs it, in a fresh process, for the tests that need the real CLI's exit code, output
  and environment (the entry point, its imports, signals);
- `cli(...)`: in this process, through typer's CliRunner, for the tests of the CLI's own parsing and printing;
- `cli_says(...)`: `cli` as (exit code, stdout, stderr), checked for what a CLI test never expects.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Mapping
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import typer
    from click.testing import Result

TRAINCTL = [sys.executable, "-m", "trainctl"]


def trainctl(
    *args: str, timeout: float = 600, cwd: Path | str | None = None, env: Mapping[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """Run it to the end, with this process's environment unless `env` is given; nothing on its stdin (a
    command that would ask, `prune`, reads none)."""
    return subprocess.run(
        [*TRAINCTL, *args], capture_output=True, text=True, timeout=timeout, cwd=cwd, env=env, stdin=subprocess.DEVNULL
    )


@cache
def _app() -> typer.Typer:
    """The typer app, loaded on the first in-process call (a test that only starts processes never loads it)."""
    from trainctl.cli import app

    return app


def cli(
    *args: str, env: Mapping[str, str | None] | None = None, input: str | None = None, width: int | None = None
) -> Result:
    """`trainctl ARGS` in this process: stdout and stderr apart, `env` laid over this process's environment (a None
    value unsets), `input` on its stdin, `width` the terminal's columns. Nothing is checked: what the runner caught
    is `result.exception`."""
    from typer.testing import CliRunner

    extra = {} if width is None else {"terminal_width": width}
    return CliRunner().invoke(_app(), list(args), env=env, input=input, **extra)


def cli_says(*args: str, env: Mapping[str, str | None] | None = None, input: str | None = None) -> tuple[int, str, str]:
    """`cli(...)` as (exit code, stdout, stderr). An exception the CLI did not turn into an exit code is raised here,
    and a traceback in its output fails the test: the CLI says what went wrong in a line, never in a traceback."""
    result = cli(*args, env=env, input=input)
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        raise result.exception
    assert "Traceback" not in result.stdout + result.stderr, result.stdout + result.stderr
    return result.exit_code, result.stdout, result.stderr

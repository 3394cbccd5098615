"""What a command prints, without typer: its output format, lines, JSON and errors.

Typer-free so that `trainctl render` and `validate` can run without loading typer's machinery
(cli/fast.py); the typer commands print through the same functions, so both paths write the same bytes.
"""

from __future__ import annotations

import json
import re
import sys
from enum import Enum
from pathlib import Path
from typing import Any

from ..errors import TrainctlError

_ANSI = re.compile(r"\033\[[;?0-9]*[a-zA-Z]")


class OutputFormat(str, Enum):
    text = "text"
    json = "json"


def echo(message: str, err: bool = False) -> None:
    """A line on stdout (or stderr), flushed, as `typer.echo` writes it: ANSI codes are stripped off a terminal."""
    stream = sys.stderr if err else sys.stdout
    if "\033" in message and not stream.isatty():
        message = _ANSI.sub("", message)
    stream.write(message + "\n")
    stream.flush()


def print_json(data: Any) -> None:
    sys.stdout.write(json.dumps(data, indent=2, sort_keys=True, default=str) + "\n")


def show_error(message: str) -> None:
    """`error: message` on stderr (rich is loaded only when there is an error to print)."""
    from rich.console import Console
    from rich.markup import escape

    Console(stderr=True, highlight=False, soft_wrap=True).print(f"[bold red]error:[/] {escape(message)}")


def report(exc: TrainctlError, output: Any) -> int:
    """Print trainctl's own error, as a JSON error object on stdout with `--output json`, else `error: ...` on
    stderr; returns its exit code (2 invalid input, 1 engine)."""
    if output is OutputFormat.json:
        print_json({"error": error_object(exc)})
    else:
        show_error(str(exc))
    return exc.exit_code


_PROBLEM = re.compile(r"^(?P<field>[\w.\[\]-]+): (?:got (?P<value>.+?); )?(?P<message>.*)$", re.DOTALL)


def error_object(exc: TrainctlError) -> dict[str, Any]:
    """`{message, exit_code, problems: [{field, value, message}]}`: each problem of a JobError split into the
    field it names, the value it got (as written in the message) and what is wrong."""
    from ..errors import JobError

    problems = []
    for text in exc.problems if isinstance(exc, JobError) else []:
        found = _PROBLEM.match(text)
        fields = found.groupdict() if found else {"field": None, "value": None, "message": text}
        problems.append(fields)
    return {"message": str(exc), "exit_code": exc.exit_code, "type": type(exc).__name__, "problems": problems}


def load_job(path: Path, overrides: list[str] | None = None) -> Any:
    """A validated Job from a file plus `--set` overrides (applied before validation)."""
    from ..job import Job

    return Job.from_yaml(path, overrides)

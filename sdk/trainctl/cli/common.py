"""What every CLI command shares: loading a job, printing errors without tracebacks, JSON output."""

from __future__ import annotations

import functools
import json
import re
import sys
from collections.abc import Callable
from enum import Enum
from pathlib import Path
from typing import Any, TypeVar

import typer

from ..errors import TrainctlError

F = TypeVar("F", bound=Callable[..., Any])


class OutputFormat(str, Enum):
    text = "text"
    json = "json"


def output_format(value: str | OutputFormat) -> OutputFormat:
    """`--output`'s value, or a message that says what it takes (not the validator's "Value error, ...")."""
    try:
        return OutputFormat(value)
    except ValueError:
        raise typer.BadParameter(f"got {value!r}; expected text or json") from None


def output_option(help_text: str = "text for people, json for scripts.") -> Any:
    """The `--output text|json` option every command that prints data takes."""
    return typer.Option("text", "--output", metavar="text|json", parser=output_format, help=help_text)


def fail(message: str, code: int) -> typer.Exit:
    """Print `error: message` to stderr and return the Exit to raise."""
    from rich.console import Console
    from rich.markup import escape

    Console(stderr=True, highlight=False, soft_wrap=True).print(f"[bold red]error:[/] {escape(message)}")
    return typer.Exit(code)


def handles_errors(func: F) -> F:
    """Turn trainctl's own errors into a message and its exit code (2 invalid input, 1 engine); with
    `--output json`, into a JSON error object on stdout, so a script reads failures as it reads results."""

    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return func(*args, **kwargs)
        except TrainctlError as exc:
            if kwargs.get("output") is OutputFormat.json:
                print_json({"error": error_object(exc)})
                raise typer.Exit(exc.exit_code) from None
            raise fail(str(exc), exc.exit_code) from None
        except KeyboardInterrupt:
            raise fail("interrupted", 130) from None

    return wrapper  # type: ignore[return-value]


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


def print_json(data: Any) -> None:
    sys.stdout.write(json.dumps(data, indent=2, sort_keys=True, default=str) + "\n")

"""What every CLI command shares: loading a job, printing errors without tracebacks, JSON output."""

from __future__ import annotations

import functools
import json
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


def fail(message: str, code: int) -> typer.Exit:
    """Print `error: message` to stderr and return the Exit to raise."""
    from rich.console import Console
    from rich.markup import escape

    Console(stderr=True, highlight=False, soft_wrap=True).print(f"[bold red]error:[/] {escape(message)}")
    return typer.Exit(code)


def handles_errors(func: F) -> F:
    """Turn trainctl's own errors into a message and its exit code (2 invalid input, 1 engine)."""

    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return func(*args, **kwargs)
        except TrainctlError as exc:
            raise fail(str(exc), exc.exit_code) from None
        except KeyboardInterrupt:
            raise fail("interrupted", 130) from None

    return wrapper  # type: ignore[return-value]


def load_job(path: Path, overrides: list[str] | None = None) -> Any:
    """A validated Job from a file plus `--set` overrides."""
    from ..job import Job

    job = Job.from_yaml(path)
    return job.with_overrides(overrides) if overrides else job


def print_json(data: Any) -> None:
    sys.stdout.write(json.dumps(data, indent=2, sort_keys=True, default=str) + "\n")

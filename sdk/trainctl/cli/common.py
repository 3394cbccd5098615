"""What every typer command shares: the `--output` option, trainctl's errors as a message and an exit code (no
traceback). The printing itself is output.py's, which the typer-free commands (cli/fast.py) share."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, TypeVar

import typer

from ..errors import TrainctlError
from .output import OutputFormat, error_object, load_job, print_json, report, show_error

F = TypeVar("F", bound=Callable[..., Any])
__all__ = ["OutputFormat", "error_object", "fail", "handles_errors", "load_job", "output_option", "print_json"]


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
    show_error(message)
    return typer.Exit(code)


def handles_errors(func: F) -> F:
    """Turn trainctl's own errors into a message and its exit code (2 invalid input, 1 engine); with
    `--output json`, into a JSON error object on stdout, so a script reads failures as it reads results."""

    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return func(*args, **kwargs)
        except TrainctlError as exc:
            raise typer.Exit(report(exc, kwargs.get("output"))) from None
        except KeyboardInterrupt:
            raise fail("interrupted", 130) from None

    return wrapper  # type: ignore[return-value]

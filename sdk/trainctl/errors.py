"""Errors a user can act on: each names what was wrong, where, and what would be accepted."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any


class TrainctlError(Exception):
    """Base of every error trainctl reports to a person (the CLI prints it without a traceback)."""

    exit_code = 1


class JobError(TrainctlError, ValueError):
    """The job is invalid: nothing was, or will be, submitted. Exit code 2."""

    exit_code = 2

    def __init__(self, problems: Sequence[str], source: str | None = None) -> None:
        self.problems = list(problems)
        self.source = source
        where = f" in {source}" if source else ""
        lines = [f"invalid job{where}:"] + [f"  - {p}" for p in self.problems]
        super().__init__("\n".join(lines))


class UsageError(JobError):
    """The command line is wrong (an option's value, a file that is a folder): not a problem of the job, so the
    message does not say "invalid job". A JobError still (exit 2, nothing submitted, `except JobError` works)."""

    def __init__(self, problems: Sequence[str], source: str | None = None) -> None:
        super().__init__(problems, source)
        lines = self.problems if len(self.problems) == 1 else [f"  - {p}" for p in self.problems]
        self.args = ("\n".join(lines),)

    def __str__(self) -> str:
        return str(self.args[0])


class EngineError(TrainctlError):
    """The engine (sbatch, the Kubernetes API, AWS, a local process) refused or failed. Exit code 1."""

    exit_code = 1

    def __init__(self, message: str, hint: str | None = None) -> None:
        self.hint = hint
        super().__init__(message if not hint else f"{message}\n  hint: {hint}")


class FieldProblem(ValueError):
    """Raised by a cross-field rule so the error names the field it is about, not the whole model."""

    def __init__(self, path: str, message: str) -> None:
        self.path = path
        super().__init__(message)


def did_you_mean(word: str, choices: Iterable[str]) -> str:
    """A ' (did you mean "x"?)' suffix when a close match exists, else ''."""
    import difflib  # here: only a mistake pays for it

    match = difflib.get_close_matches(word, list(choices), n=1, cutoff=0.6)
    return f' (did you mean "{match[0]}"?)' if match else ""


def short_repr(value: Any, limit: int = 60) -> str:
    """A value as it appears in an error message: bounded, one line."""
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."

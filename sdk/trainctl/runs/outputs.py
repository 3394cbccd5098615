"""One reader of a run's output folder, whichever way its bytes reach this machine.

The trainer (or a `command:` program) leaves summary.json, metrics.jsonl and progress.json in the run's output
folder (docs/contracts.md). A target hands in how to read one of its files (`Read`): the local target a path,
SLURM `cat` through its login shell, SageMaker's local mode each host's model folder. What the files mean, and
what an empty, cut-short or corrupt one gives, is decided here once for every target:
- summary.json: a JSON object, else None (absent, empty, cut short, not an object);
- metrics.jsonl: its whole rows, in order ([] when empty; a line cut short by a running writer is skipped, bytes
  that are not UTF-8 read as U+FFFD), else None when there is no file;
- progress.json: a progress record, else None.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from . import progress as progress_of
from .curves import from_jsonl
from .records import SUMMARY
from .state import Progress

METRICS = "metrics.jsonl"

Read = Callable[[str], bytes | None]
"""A file of the output folder by name: its bytes, or None when it is not there or cannot be read."""


def folder(path: str | Path | None) -> Read:
    """The reader of an output folder on this machine (None: the run has none)."""

    def read(name: str) -> bytes | None:
        if not path:
            return None
        try:
            return (Path(path) / name).read_bytes()
        except OSError:
            return None

    return read


def summary(read: Read) -> dict[str, Any] | None:
    """The trainer's summary.json (world size, steps, accuracy, checkpoint), once the run wrote it whole."""
    data = read(SUMMARY)
    try:
        found = json.loads(data) if data else None
    except ValueError:
        return None
    return found if isinstance(found, dict) else None


def accuracy_line(summary: dict[str, Any]) -> str | None:
    """The trainer's validation result in the words `submit --wait` and `status` both print, else None."""
    acc, loss = summary.get("val_accuracy"), summary.get("val_loss")
    if not isinstance(acc, int | float):
        return None
    return f"accuracy: {acc:.4f}" + (f" (val_loss {loss:.4f})" if isinstance(loss, int | float) else "")


def metrics(read: Read) -> list[dict[str, Any]] | None:
    """metrics.jsonl's rows; None without the file (a command job's log is read instead)."""
    data = read(METRICS)
    return None if data is None else from_jsonl(data.decode(errors="replace"))


def progress(read: Read) -> Progress | None:
    """progress.json, when the run wrote one (else a target reads the last progress line of its log)."""
    data = read(progress_of.FILE_NAME)
    return progress_of.from_json(data) if data else None

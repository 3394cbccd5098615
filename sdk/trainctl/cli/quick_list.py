"""`trainctl list` without typer, and the runs table both paths print.

typer builds a pydantic adapter for every option it processes, so any typer command pays for
importing pydantic (~0.1 s here); `list` needs nothing else from it. `try_list` takes the plain
forms of `trainctl list` (known options, each at most once, valid values) and answers them with
exactly what the typer command prints; anything else (help, errors, --refresh, no runs) returns
False and goes through typer, so messages and exit codes stay typer's own.
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Sequence
from typing import Any

TARGETS = ("local", "slurm", "kubernetes", "sagemaker")  # = job.TARGETS, without loading the Job model
COLORS = {"succeeded": "green", "failed": "red", "cancelled": "yellow", "running": "cyan", "queued": "blue"}
HEADERS = ("RUN", "JOB", "STATE", "CREATED", "AGE")
PIPE_WIDTH = 400  # piped output is not cut to 80 columns: whole ids and names, one run per line
_OPTIONS = {"--target": "target", "-t": "target", "--state": "state", "--limit": "limit", "-n": "limit",
            "--output": "output"}  # fmt: skip
# Set, these make rich colour or lay out piped output differently: rich prints the table then.
_RICH_ENV = ("FORCE_COLOR", "TTY_COMPATIBLE", "TTY_INTERACTIVE")


def parse_list_args(argv: Sequence[str]) -> dict[str, Any] | None:
    """`list` options as the typer command would read them, or None for anything else."""
    if not argv or argv[0] != "list":
        return None
    got: dict[str, Any] = {}
    args = list(argv[1:])
    while args:
        arg = args.pop(0)
        name, eq, value = arg.partition("=") if arg.startswith("--") else (arg, "", "")
        key = _OPTIONS.get(name)
        if key is None or key in got:
            return None
        if not eq:
            if not args:
                return None
            value = args.pop(0)
        got[key] = value
    limit = got.get("limit", "50")
    if not (limit.isascii() and limit.isdigit()) or int(limit) < 1:
        return None
    state = got.get("state")
    if (got.get("target") is not None and got["target"] not in TARGETS) or got.get("output", "text") not in (
        "text",
        "json",
    ):
        return None
    from ..run import RunState

    if state is not None and state not in {s.value for s in RunState}:
        return None
    return {"target": got.get("target"), "state": state, "limit": int(limit), "output": got.get("output", "text")}


def try_list(argv: Sequence[str]) -> bool:
    """Answer a plain `trainctl list` here; False when typer should handle the command line."""
    opts = parse_list_args(argv)
    if opts is None:
        return False
    from ..errors import TrainctlError
    from ..registry import Registry

    try:
        records = Registry().list(target=opts["target"], state=opts["state"], limit=opts["limit"])
    except TrainctlError:
        return False  # typer's path prints the error
    if opts["output"] == "json":
        sys.stdout.write(json_text([r.to_dict() for r in records]))
        return True
    if not records:
        return False
    print_table(records)
    return True


def json_text(data: Any) -> str:
    """What `cli.common.print_json` writes."""
    return json.dumps(data, indent=2, sort_keys=True, default=str) + "\n"


def age(created: float) -> str:
    seconds = max(0, int(time.time() - created))
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{seconds // size}{unit}"
    return f"{seconds}s"


def rows(records: Sequence[Any]) -> list[tuple[str, str, str, str, str]]:
    return [
        (
            rec.id,
            rec.run.job_name,
            rec.state.value,
            time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(rec.run.created_at)),
            age(rec.run.created_at),
        )
        for rec in records
    ]


def print_table(records: Sequence[Any]) -> None:
    """The runs table: plain text when piped and the cells are plain, else rich (colours, terminal width)."""
    table_rows = rows(records)
    if not sys.stdout.isatty() and not any(v in os.environ for v in _RICH_ENV):
        text = plain_table(table_rows)
        if text is not None:
            sys.stdout.write(text)
            return
    rich_table(table_rows, width=None if sys.stdout.isatty() else PIPE_WIDTH)


def rich_table(table_rows: Sequence[tuple[str, ...]], width: int | None, file: Any = None) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(box=None, pad_edge=False, header_style="bold")
    # ids are for copying whole
    table.add_column(HEADERS[0], no_wrap=True, min_width=max(len(r[0]) for r in table_rows))
    for column in HEADERS[1:]:
        table.add_column(column)
    for run_id, job, state, created, run_age in table_rows:
        table.add_row(run_id, job, f"[{COLORS.get(state, 'white')}]{state}[/]", created, run_age)
    Console(highlight=False, soft_wrap=True, width=width, file=file).print(table)


def _plain_cell(text: str) -> bool:
    """Cells rich prints as they are: printable ASCII, no markup, nothing rich could read as a `:name:`
    emoji code (a colon-delimited stretch without spaces; 1-2 digits, as in a time, are no emoji name)."""
    if not (text.isascii() and text.isprintable()) or "[" in text:
        return False
    return all(" " in seg or (seg.isdigit() and len(seg) <= 2) for seg in text.split(":")[1:-1])


def plain_table(table_rows: Sequence[tuple[str, ...]]) -> str | None:
    """The bytes rich prints for the table on a pipe (no colour, PIPE_WIDTH columns), or None when a cell
    could render otherwise there (markup, emoji codes, wide characters) or the table would have to wrap."""
    if not all(_plain_cell(cell) for row in table_rows for cell in row):
        return None
    widths = [max(len(h), *(len(r[i]) for r in table_rows)) for i, h in enumerate(HEADERS)]
    if sum(widths) + 2 * (len(widths) - 1) > PIPE_WIDTH:
        return None
    lines = ["  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)) for row in [HEADERS, *table_rows]]
    return "\n".join(lines) + "\n"

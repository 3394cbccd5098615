"""The runs table `trainctl list` prints: rich on a terminal, plain aligned text when piped.

Piped output skips importing rich (a third of the command's time over a big registry) and is easy
for scripts: one run per line, whole ids, no colour, never cut to the terminal's width.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Sequence
from typing import Any

COLORS = {"succeeded": "green", "failed": "red", "cancelled": "yellow", "running": "cyan", "queued": "blue"}
HEADERS = ("RUN", "JOB", "STATE", "CREATED", "AGE")


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
    table_rows = rows(records)
    if sys.stdout.isatty():
        rich_table(table_rows)
    else:
        sys.stdout.write(plain_table(table_rows))


def rich_table(table_rows: Sequence[tuple[str, ...]], file: Any = None) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(box=None, pad_edge=False, header_style="bold")
    table.add_column(HEADERS[0], no_wrap=True)  # ids are for copying whole
    for column in HEADERS[1:]:
        table.add_column(column)
    for run_id, job, state, created, run_age in table_rows:
        table.add_row(run_id, job, f"[{COLORS.get(state, 'white')}]{state}[/]", created, run_age)
    Console(highlight=False, soft_wrap=True, file=file).print(table)


def plain_table(table_rows: Sequence[tuple[str, ...]]) -> str:
    """Columns padded to their widest cell, two spaces apart, a header line first."""
    widths = [max(len(h), *(len(r[i]) for r in table_rows)) for i, h in enumerate(HEADERS)]
    lines = [
        "  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip() for row in [HEADERS, *table_rows]
    ]
    return "\n".join(lines) + "\n"

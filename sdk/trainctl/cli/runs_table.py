"""The runs table `trainctl list` prints: rich on a terminal, plain aligned text when piped.

Piped output skips importing rich (a third of the command's time over a big registry) and is easy
for scripts: one run per line, whole ids, no colour, never cut to the terminal's width.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Sequence
from typing import Any

from ..runs.times import age, duration

COLORS = {"succeeded": "green", "failed": "red", "cancelled": "yellow", "running": "cyan", "queued": "blue"}
HEADERS = ("RUN", "JOB", "STATE", "PROGRESS", "CREATED", "AGE", "DURATION", "REASON")


def rows(records: Sequence[Any]) -> list[tuple[str, ...]]:
    from ..runs.progress import short

    return [
        (
            rec.id,
            rec.run.job_name,
            rec.state.value,
            short(rec.run.progress),
            time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(rec.run.created_at)),
            age(rec.run.created_at),
            took(rec),
            rec.run.reason.splitlines()[0] if rec.state.finished and rec.run.reason else "",
        )
        for rec in records
    ]


def took(rec: Any) -> str:
    """From submit to its end (a status saw it end), or until now while it is unfinished (as `docker ps` says
    "Up 5 minutes"); `-` for an ended run whose end no status has read yet (`list --refresh`, `status`)."""
    end = rec.run.finished_at if rec.state.finished else time.time()
    return duration(max(0.0, end - rec.run.created_at)) if end is not None else "-"


def grouped(records: Sequence[Any]) -> list[Any]:
    """Newest first, except that the runs of one sweep stand together, where its newest run stands."""
    out: list[Any] = []
    seen: set[str] = set()
    for rec in records:
        sweep = rec.run.sweep_id
        if sweep is None:
            out.append(rec)
        elif sweep not in seen:
            seen.add(sweep)
            out.extend(r for r in records if r.run.sweep_id == sweep)
    return out


def print_table(records: Sequence[Any]) -> None:
    """The runs; a SWEEP column, and each sweep's runs together, when any run is a sweep's trial."""
    records = grouped(records)
    table_rows: list[tuple[str, ...]] = list(rows(records))
    headers: tuple[str, ...] = HEADERS
    if any(rec.run.sweep_id for rec in records):
        headers = (*HEADERS, "SWEEP")
        table_rows = [(*row, rec.run.sweep_id or "") for row, rec in zip(table_rows, records, strict=True)]
    if sys.stdout.isatty():
        rich_table(table_rows, headers=headers)
    else:
        sys.stdout.write(plain_table(table_rows, headers))


def rich_table(table_rows: Sequence[tuple[str, ...]], file: Any = None, headers: Sequence[str] = HEADERS) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(box=None, pad_edge=False, header_style="bold")
    table.add_column(headers[0], no_wrap=True)  # ids are for copying whole
    for column in headers[1:]:
        table.add_column(column)
    for run_id, job, state, *rest in table_rows:
        table.add_row(run_id, job, f"[{COLORS.get(state, 'white')}]{state}[/]", *rest)
    Console(highlight=False, soft_wrap=True, file=file).print(table)


def plain_table(table_rows: Sequence[tuple[str, ...]], headers: Sequence[str] = HEADERS) -> str:
    """Columns padded to their widest cell, two spaces apart, a header line first."""
    widths = [max(len(h), *(len(r[i]) for r in table_rows)) for i, h in enumerate(headers)]
    lines = [
        "  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip() for row in [headers, *table_rows]
    ]
    return "\n".join(lines) + "\n"


def print_rows(headers: Sequence[str], table_rows: Sequence[tuple[str, ...]]) -> None:
    """Any table (`sweep status`): plain aligned text, whole cells, for people and scripts alike."""
    sys.stdout.write(plain_table(table_rows, headers))

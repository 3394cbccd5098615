"""`trainctl list`'s table: plain aligned text when piped (scripts read it), rich on a terminal."""

from __future__ import annotations

import io
import subprocess
import sys
import time
from pathlib import Path

from trainctl.cli import runs_table


def _record_runs() -> None:
    from trainctl import Run
    from trainctl.run_store import RunStore

    reg = RunStore()
    reg.record(Run(target="slurm", native_id="42", job_name="big", created_at=time.time() - 7200), state="running")
    reg.record(Run(target="local", native_id="x-1", job_name="small"), state="succeeded")
    reg.record(Run(target="kubernetes", native_id="ns/j-3", job_name="a-much-longer-name"), state="failed")


def test_plain_table_aligns_columns_under_their_headers() -> None:
    rows = [("kubernetes:ns/job-1", "job-1", "succeeded", "40/40 (100 %)", "2026-11-21 14:00:00", "3d"),
            ("slurm:42", "b", "queued", "-", "2026-11-21 14:00:01", "59s")]  # fmt: skip
    lines = runs_table.plain_table(rows).splitlines()
    assert lines[0].split() == list(runs_table.HEADERS)
    starts = [lines[0].index(h) for h in runs_table.HEADERS]
    for line, row in zip(lines[1:], rows, strict=True):
        assert [line.index(cell, start) for cell, start in zip(row, starts, strict=True)] == starts


def test_rich_table_shows_every_cell() -> None:
    out = io.StringIO()
    runs_table.rich_table([("local:x-1", "small", "running", "12/40 (30 %)", "2026-11-21 14:00:00", "1m")], file=out)
    assert all(cell in out.getvalue() for cell in ("local:x-1", "small", "running", "12/40 (30 %)", "1m"))


def test_piped_list_prints_one_run_per_line_newest_first() -> None:
    _record_runs()
    script = Path(sys.executable).parent / "trainctl"
    proc = subprocess.run([str(script), "list"], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0].split() == list(runs_table.HEADERS)
    assert [line.split()[0] for line in lines[1:]] == ["kubernetes:ns/j-3", "local:x-1", "slurm:42"]
    assert lines[3].split()[1:4] == ["big", "running", "-"] and lines[3].split()[-1] == "2h"

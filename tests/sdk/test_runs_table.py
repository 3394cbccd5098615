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
    from trainctl.runs.store import RunStore

    reg = RunStore()
    reg.record(Run(target="slurm", native_id="42", job_name="big", created_at=time.time() - 7200), state="running")
    reg.record(Run(target="local", native_id="x-1", job_name="small"), state="succeeded")
    reg.record(Run(target="kubernetes", native_id="ns/j-3", job_name="a-much-longer-name"), state="failed")


def test_plain_table_aligns_columns_under_their_headers() -> None:
    rows = [("kubernetes:ns/job-1", "job-1", "succeeded", "40/40 (100 %)", "2026-11-21 14:00:00", "3d", "2m 03s",
             "Completed"),
            ("slurm:42", "b", "queued", "-", "2026-11-21 14:00:01", "59s", "59.0s", "-")]  # fmt: skip
    lines = runs_table.plain_table(rows).splitlines()
    assert lines[0].split() == list(runs_table.HEADERS)
    starts = [lines[0].index(h) for h in runs_table.HEADERS]
    for line, row in zip(lines[1:], rows, strict=True):
        assert [line.index(cell, start) for cell, start in zip(row, starts, strict=True)] == starts


def test_rich_table_shows_every_cell() -> None:
    out = io.StringIO()
    row = ("local:x-1", "small", "running", "12/40 (30 %)", "2026-11-21 14:00:00", "1m", "1m 02s", "")
    runs_table.rich_table([row], file=out, headers=runs_table.HEADERS)
    assert all(cell in out.getvalue() for cell in ("local:x-1", "small", "running", "12/40 (30 %)", "1m"))


def test_piped_list_prints_one_run_per_line_newest_first() -> None:
    _record_runs()
    script = Path(sys.executable).parent / "trainctl"
    proc = subprocess.run([str(script), "list"], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0].split() == list(runs_table.HEADERS)
    assert [line.split()[0] for line in lines[1:]] == ["kubernetes:ns/j-3", "local:x-1", "slurm:42"]
    assert lines[3].split()[1:4] == ["big", "running", "-"] and lines[3].split()[-4:-1] == ["2h", "2h", "00m"]
    assert lines[2].split()[-1] == "-"  # succeeded, but no status has read its end yet


def test_list_shows_how_long_each_run_took_and_why_it_ended(tmp_path: Path) -> None:
    """DURATION and REASON (issue 27 finding 8): the run store keeps when a status first saw the run end (its
    target's own time where it has one) and why; real local runs, one that fails."""
    from trainctl import Job

    ok = Job(name="ok", command=["python", "-c", "import time; time.sleep(1.5)"]).submit("local")
    bad = Job(name="bad", command=["python", "-c", "raise SystemExit(3)"]).submit("local")
    assert ok.wait(timeout=120).state.value == "succeeded" and bad.wait(timeout=120).state.value == "failed"
    script = Path(sys.executable).parent / "trainctl"
    proc = subprocess.run([str(script), "list"], capture_output=True, text=True, timeout=60)
    lines = proc.stdout.splitlines()
    reason_at, took_at = lines[0].index("REASON"), lines[0].index("DURATION")
    by_job = {line.split()[1]: line for line in lines[1:]}
    took = by_job["ok"][took_at:reason_at].strip()
    assert took.endswith("s") and 1.5 <= float(took.removesuffix("s")) < 60, took
    reason = bad.status().reason
    assert reason and by_job["bad"][reason_at:] == reason.splitlines()[0], (reason, by_job["bad"])
    first = _recorded_end(bad.id)
    time.sleep(0.05)
    bad.status()  # read again: the end first seen stays
    assert _recorded_end(bad.id) == first


def _recorded_end(run_id: str) -> float | None:
    from trainctl.runs.store import RunStore

    found = RunStore().get(run_id)
    return found.finished_at if found else None

"""`trainctl list` without typer: same bytes as the typer command and as rich's table, and it loads
neither typer, rich nor pydantic for the plain forms."""

from __future__ import annotations

import io
import subprocess
import sys
import time
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from trainctl.cli import quick_list as ql
from typer.testing import CliRunner

STATES = ["succeeded", "failed", "cancelled", "running", "queued", "unknown"]
cells = st.text(alphabet=st.characters(min_codepoint=32, max_codepoint=126), min_size=1, max_size=40)
ids = st.builds(lambda t, n: f"{t}:{n}", st.sampled_from(ql.TARGETS), cells)
times = st.integers(0, 2_000_000_000).map(lambda t: time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(t)))
table_rows = st.lists(
    st.tuples(ids, cells, st.sampled_from(STATES), times, st.sampled_from(["0s", "59s", "1m", "23h", "400d"])),
    min_size=1,
    max_size=8,
)


def _rich(rows: list[tuple[str, str, str, str, str]]) -> str:
    out = io.StringIO()
    ql.rich_table(rows, width=ql.PIPE_WIDTH, file=out)
    return out.getvalue()


@settings(max_examples=300, deadline=None)
@given(table_rows)
def test_plain_table_is_richs_bytes_or_declines(rows: list[tuple[str, str, str, str, str]]) -> None:
    plain = ql.plain_table(rows)
    if plain is not None:
        assert plain == _rich(rows)


@pytest.mark.parametrize(
    "cell", ["[bold]x[/]", "a:smile:b", "x:100:y", "wide\u4e00", "tab\there", "a" * 390, "é", "k:thumbsup-text:"]
)
def test_cells_rich_would_change_go_to_rich(cell: str) -> None:
    rows = [("local:a", cell, "running", "2026-11-21 14:00:00", "1m")]
    assert ql.plain_table(rows) is None
    _rich(rows)  # and rich still prints them


def test_typical_table_takes_the_plain_path() -> None:
    rows = [("kubernetes:ns/job-1", "job-1", "succeeded", "2026-11-21 14:00:00", "3d"), ("slurm:42", "b", "queued",
            "2026-11-21 14:00:01", "59s")]  # fmt: skip
    assert ql.plain_table(rows) == _rich(rows)


@pytest.mark.parametrize(
    "argv",
    [
        ["list", "--help"],
        ["list", "--refresh"],
        ["list", "--target", "aws"],
        ["list", "--state", "finished"],
        ["list", "-n", "0"],
        ["list", "-n", "x"],
        ["list", "-n5"],
        ["list", "--limit"],
        ["list", "-t", "local", "--target", "slurm"],
        ["list", "--output", "yaml"],
        ["list", "--", "x"],
        ["status", "local:x"],
        [],
    ],
)
def test_anything_but_the_plain_forms_goes_to_typer(argv: list[str]) -> None:
    assert ql.parse_list_args(argv) is None


def test_plain_forms_parse_like_typer() -> None:
    got = ql.parse_list_args(["list", "-t", "slurm", "--state=running", "--limit", "7", "--output=json"])
    assert got == {"target": "slurm", "state": "running", "limit": 7, "output": "json"}
    assert ql.parse_list_args(["list"]) == {"target": None, "state": None, "limit": 50, "output": "text"}


def _record_runs() -> None:
    from trainctl import Run
    from trainctl.registry import Registry

    reg = Registry()
    reg.record(Run(target="slurm", native_id="42", job_name="big", created_at=time.time() - 7200), state="running")
    reg.record(Run(target="local", native_id="x-1", job_name="small"), state="succeeded")
    reg.record(Run(target="kubernetes", native_id="ns/j-3", job_name="j-3"), state="failed")


ARGVS = [
    ["list"],
    ["list", "--target", "slurm"],
    ["list", "-n", "2", "--output", "json"],
    ["list", "--state=failed"],
    ["list", "--target", "sagemaker"],  # no runs: typer's message
    ["list", "--state", "finished"],  # invalid: typer's error
]


@pytest.mark.parametrize("argv", ARGVS)
def test_console_script_prints_what_the_typer_command_prints(argv: list[str]) -> None:
    from trainctl.cli import app

    _record_runs()
    typer_result = CliRunner().invoke(app, argv)
    script = Path(sys.executable).parent / "trainctl"
    proc = subprocess.run([str(script), *argv], capture_output=True, text=True)
    assert proc.returncode == typer_result.exit_code
    assert proc.stdout == typer_result.stdout
    assert proc.stderr.strip() == typer_result.stderr.strip()


def test_plain_list_loads_no_typer_rich_or_pydantic() -> None:
    _record_runs()
    code = (
        "import sys; sys.argv = ['trainctl', 'list']; from trainctl.cli import main; main(); "
        "print(sorted({m.split('.')[0] for m in sys.modules} & {'typer', 'rich', 'pydantic', 'click'}), file=sys.stderr)"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert proc.stderr.strip() == "[]"
    assert "local:x-1" in proc.stdout

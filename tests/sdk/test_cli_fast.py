"""`trainctl validate`, `render` and `list` start without typer (cli/fast.py): the same bytes, exit codes and files
as the typer app for every line it takes, and the typer app's own answer (help, usage errors) for every line it does
not."""

from __future__ import annotations

from pathlib import Path

import pytest
from run_cli import cli  # tests/support
from trainctl.cli.fast import parse, run
from trainctl.cli.output import OutputFormat

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"
BAD = "name: Bad_Name\ntrainer: {optimizer: adam}\nresources: {nodes: 0}\n"


def lines(job: Path, bad: Path, out: Path) -> list[list[str]]:
    """Command lines the fast path takes: every option spelling, good and bad jobs, text and JSON, notes and
    warnings on stderr."""
    sm = str(EXAMPLES / "digits-sagemaker.yaml")
    return [
        ["validate", str(job)],
        ["validate", str(job), "--output", "json", "-t", "slurm"],
        ["validate", str(job), "--target=sagemaker"],
        ["validate", str(job), "--target", "sagemaker", "--output=json"],
        ["validate", str(bad)],
        ["validate", str(bad), "--output", "json"],
        ["validate", str(job), "-s", "trainer.epochs=-1", "--set", "name=x"],
        ["validate", str(job), "-O", "nonsense=1"],
        ["validate", sm, "-t", "sagemaker", "--option", "local=true"],
        ["validate", str(job), "-s", "resources.gpus_per_node=1", "-s", "resources.procs_per_node=1"],
        ["render", str(job)],
        ["render", "-tslurm", str(job)],
        ["render", str(job), "--target", "k8s"],
        ["render", str(job), "-t", "kubernetes", "--output", "json"],
        ["render", sm, "-t", "sagemaker"],
        ["render", str(job), "-t", "sagemaker"],
        ["render", str(job), "-t", "locl"],
        ["render", str(job), "-o", str(out), "--set", "trainer.epochs=2"],
        ["render", str(bad), "--output", "json"],
        ["render", str(ROOT / "nope.yaml")],
        ["render", "--", str(job)],
    ]


@pytest.fixture
def files(digits_job_file: Path, tmp_path: Path) -> tuple[Path, Path, Path]:
    bad = tmp_path / "bad.yaml"
    bad.write_text(BAD)
    return digits_job_file, bad, tmp_path / "artifact.txt"


def test_the_fast_path_prints_what_the_typer_app_prints(
    files: tuple[Path, Path, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    job, bad, out = files
    codes = set()
    for argv in lines(job, bad, out):
        typer_result = cli(*argv)
        typer_file = out.read_text() if out.exists() else None
        out.unlink(missing_ok=True)
        capsys.readouterr()
        code = run(argv)
        fast = capsys.readouterr()
        assert code is not None, argv
        assert (code, fast.out, fast.err) == (typer_result.exit_code, typer_result.stdout, typer_result.stderr), argv
        assert (out.read_text() if out.exists() else None) == typer_file, argv
        out.unlink(missing_ok=True)
        codes.add(code)
    assert codes == {0, 2}  # both outcomes were compared


@pytest.mark.parametrize(
    "argv",
    [
        [],
        ["render"],
        ["submit", "job.yaml"],
        ["render", "--help"],
        ["validate", "-h"],
        ["render", "a.yaml", "b.yaml"],
        ["render", "a.yaml", "--output", "yaml"],
        ["render", "a.yaml", "--target"],
        ["render", "a.yaml", "--target", "--set"],
        ["render", "a.yaml", "--target="],
        ["validate", "a.yaml", "-o", "x"],
        ["render", "a.yaml", "-O", "x=1"],
        ["render", "a.yaml", "--tar", "slurm"],
        ["list", "--help"],
        ["list", "extra"],
        ["list", "--limit", "0"],
        ["list", "-L", "many"],
        ["list", "--refresh=yes"],
        ["list", "--state"],
        ["list", "--set", "a=1"],
        ["list", "--output", "csv"],
    ],
)
def test_what_the_fast_path_leaves_to_typer(argv: list[str]) -> None:
    assert parse(argv) is None


def test_the_fast_path_reads_options_as_click_does() -> None:
    got = parse(["validate", "-s", "a=1", "j.yaml", "--set=b=2", "-Ox=1", "--option", "y=2", "-tslurm"])
    assert got == {"job_file": Path("j.yaml"), "target": "slurm", "overrides": ["a=1", "b=2"],
                   "options": ["x=1", "y=2"], "output": OutputFormat.text}  # fmt: skip
    got = parse(["render", "j.yaml", "-t", "local", "--target", "slurm", "-o", "o.sh", "--output", "json"])
    assert got == {"job_file": Path("j.yaml"), "target": "slurm", "overrides": [], "out": Path("o.sh"),
                   "output": OutputFormat.json}  # fmt: skip


def test_list_on_the_fast_path_prints_what_the_typer_app_prints(capsys: pytest.CaptureFixture[str]) -> None:
    """`trainctl list` starts without typer too (the run store's records, the table, JSON, filters, errors)."""
    from trainctl.run import Run
    from trainctl.runs.store import RunStore

    store = RunStore()
    runs = [("slurm", "101", "succeeded"), ("kubernetes", "ns/a", "failed"), ("sagemaker", "b", "cancelled")]
    for i, (target, native, state) in enumerate(runs):
        record = {"target": target, "native_id": native, "job_name": f"job-{i}", "created_at": 1_700_000_000 + i}
        store.record(Run.model_validate(record), state)
    argvs = [["list"], ["list", "--output", "json"], ["list", "-t", "slurm"], ["list", "--target=k8s", "-L", "1"],
             ["list", "--state", "failed"], ["list", "--state", "running"], ["list", "--state", "nope"],
             ["list", "-t", "slurn"], ["list", "--limit=2", "--refresh"], ["list", "-L2", "--output=json"],
             ["list", "-t", "local", "--output", "json"], ["list", "--state", "nope", "--output", "json"]]  # fmt: skip
    codes = set()
    for argv in argvs:
        typer_result = cli(*argv)
        capsys.readouterr()
        code = run(argv)
        fast = capsys.readouterr()
        assert code is not None, argv
        assert (code, fast.out, fast.err) == (typer_result.exit_code, typer_result.stdout, typer_result.stderr), argv
        codes.add(code)
    assert codes == {0, 2}
    assert parse(["list", "-L3", "--refresh", "--state=queued"]) == {
        "target": None, "state": "queued", "limit": 3, "refresh": True, "output": OutputFormat.text
    }  # fmt: skip


@pytest.mark.parametrize("message", ["plain", "bold \033[1mname\033[0m off a terminal", "ünïcode ✓"])
@pytest.mark.parametrize("err", [False, True])
def test_echo_writes_what_typer_echo_writes(message: str, err: bool, capsys: pytest.CaptureFixture[str]) -> None:
    import typer
    from trainctl.cli.output import echo

    typer.echo(message, err=err)
    theirs = capsys.readouterr()
    echo(message, err=err)
    assert capsys.readouterr() == theirs and (theirs.err if err else theirs.out).endswith("\n")

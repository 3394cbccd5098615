"""How `trainctl` starts: `--help` loads no pydantic, and `render`, `validate` and `list` load no typer, no engine
library and no more than IMPORT_BUDGET modules (docs/benchmarks.md section 4), counted with `python -X importtime`.

Counted, not timed, so that load from other work on the machine cannot make these flaky."""

from __future__ import annotations

from pathlib import Path

import pytest

BUILT_IN = ("kubernetes", "local", "sagemaker", "slurm")
ROOT = Path(__file__).resolve().parents[2]


def test_help_loads_no_pydantic_and_no_engine_library() -> None:
    """`trainctl --help` reads the target names from entry-point metadata only (docs/benchmarks.md section 4):
    no job model, no run records, no engine client is imported for it."""
    import subprocess
    import sys

    code = (
        "import sys; from trainctl.cli import app; from typer.testing import CliRunner;"
        "CliRunner().invoke(app, ['--help']);"
        "print(sorted(m for m in ('pydantic', 'torch', 'boto3', 'kubernetes', 'sagemaker') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    assert out.stdout.strip() == "[]", out.stdout + out.stderr


# `render` and `validate` start without typer (cli/fast.py) and load neither the submit machinery, the run records,
# the targets' handles, nor an engine library (docs/benchmarks.md section 4). Counted, not timed, so load from other
# work cannot make it flaky: 239-245 modules when this was written (276-281 before importlib.metadata left the path,
# 295 before the run records did, ~390 with typer's machinery and submit/runner.py back).
IMPORT_BUDGET = 250
NEVER_ON_RENDER = ("typer", "click", "rich", "torch", "boto3", "botocore", "kubernetes", "sagemaker", "pathspec")
NEVER_ON_RENDER += (
    "trainctl.submit.runner",
    "trainctl.run",
    "trainctl.runs.store",
    "trainctl.submit.trackers",
    "trainctl.submit.resume",
)
# the run records and the handles (only Provenance, from runs/record.py, goes into an artifact), and a package's
# METADATA (the email parser: targets/registry.py reads a plug-in's distribution name only to report a clash), the bundle's
# packer (a job without `code:` packs nothing) and difflib (only a mistake has a "did you mean")
NEVER_ON_RENDER += ("trainctl.runs.state", *(f"trainctl.targets.{t}.handle" for t in BUILT_IN), "email.parser")
NEVER_ON_RENDER += ("tarfile", "gzip", "difflib")
# importlib.metadata (zipfile, email, csv): the targets' entry points are remembered between commands
# (targets/declared.py) and pydantic's plug-in loader has a stand-in while its plug-ins are off (cli/no_plugins.py)
NEVER_ON_RENDER += ("importlib.metadata", "zipfile", "email", "csv", "pydantic.plugin._loader")


def _imported(args: list[str], start: tuple[str, ...] = ("-m", "trainctl")) -> dict[str, int]:
    """{module: its own import time in µs} of `python -X importtime -m trainctl ARGS` (which must succeed), after
    one untimed run: the first command after a package changed reads the entry points' metadata (targets/declared.py)."""
    import subprocess
    import sys

    subprocess.run([sys.executable, *start, *args], capture_output=True, timeout=120, cwd=ROOT)
    proc = subprocess.run([sys.executable, "-X", "importtime", *start, *args], capture_output=True, text=True,
                          timeout=120, cwd=ROOT)  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-2000:]
    rows = [line[len("import time:") :].split("|") for line in proc.stderr.splitlines()]
    return {row[2].strip(): int(row[0]) for row in rows if len(row) == 3 and row[0].strip().isdigit()}


@pytest.mark.parametrize(
    "args",
    [
        ["render", "examples/digits.yaml", "--target", "slurm"],
        ["render", "examples/digits.yaml", "-t", "kubernetes", "--output", "json"],
        ["render", "examples/digits.yaml", "--target", "local"],
        ["render", "examples/digits-sagemaker.yaml", "--target", "sagemaker"],
        ["validate", "examples/digits.yaml", "--target", "slurm"],
        ["validate", "examples/digits-sagemaker.yaml", "--target", "sagemaker"],
    ],
)
def test_render_and_validate_stay_within_their_import_budget(args: list[str]) -> None:
    imported = _imported(args)
    assert "trainctl.spec.job_spec" in imported and "pydantic" in imported  # the import log was read
    heavy = sorted(m for m in imported if any(m == n or m.startswith(f"{n}.") for n in NEVER_ON_RENDER))
    assert not heavy, f"trainctl {' '.join(args)} imported {heavy[:8]}"
    assert len(imported) <= IMPORT_BUDGET, f"trainctl {' '.join(args)} imported {len(imported)} modules"


def test_validate_of_a_local_job_stays_within_its_import_budget(digits_job_file: Path) -> None:
    """The local target's check reads the job's data folders (there, here) and no run store."""
    test_render_and_validate_stay_within_their_import_budget(["validate", str(digits_job_file)])


def test_list_starts_without_typer_and_without_an_engine_library() -> None:
    """`trainctl list` reads the run store without typer's machinery (cli/fast.py), here over an empty store (this
    test's own TRAINCTL_HOME) and, in the benchmark, over 10,000 runs (docs/benchmarks.md section 4)."""
    imported = _imported(["list"])
    assert "trainctl.runs.store" in imported  # the import log was read
    heavy = ("typer", "click", "rich", "torch", "boto3", "botocore", "kubernetes", "sagemaker")
    assert not sorted(m for m in imported if m.split(".")[0] in heavy)


def test_the_import_budget_catches_typer_on_the_path() -> None:
    """The check itself: the same command line through the typer app loads what the budget forbids."""
    imported = _imported(["render", "examples/digits.yaml"], ("-c", "from trainctl.cli.typer_app import app; app()"))
    assert "typer" in imported and len(imported) > IMPORT_BUDGET


def test_the_cli_loads_no_pydantic_plugin_unless_the_user_asks(tmp_path: Path) -> None:
    """pydantic scans every package's entry points for plug-ins at the first model built (pydantic/plugin/_loader.py,
    `get_plugins`); the CLI turns that off with pydantic's own PYDANTIC_DISABLE_PLUGINS, and a user's value wins."""
    import os
    import subprocess
    import sys

    marker = tmp_path / "loaded"
    (tmp_path / "fake_pydantic_plugin.py").write_text(
        f"open({str(marker)!r}, 'w').close()\n"
        "class Plugin:  # pydantic's PydanticPluginProtocol, with no handlers\n"
        "    def new_schema_validator(self, *args, **kwargs):\n"
        "        return None, None, None\n"
        "plugin = Plugin()\n"
    )
    dist = tmp_path / "fake_pydantic_plugin-1.0.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: fake-pydantic-plugin\nVersion: 1.0\n")
    (dist / "entry_points.txt").write_text("[pydantic]\nfake = fake_pydantic_plugin:plugin\n")

    def validate(**env: str) -> None:
        run_env = {k: v for k, v in os.environ.items() if k != "PYDANTIC_DISABLE_PLUGINS"} | env
        run_env["PYTHONPATH"] = os.pathsep.join([str(tmp_path), run_env.get("PYTHONPATH", "")])
        proc = subprocess.run([sys.executable, "-m", "trainctl", "validate", "examples/digits.yaml", "-t", "slurm"],
                              capture_output=True, text=True, timeout=120, cwd=ROOT, env=run_env)  # fmt: skip
        assert proc.returncode == 0, proc.stderr[-2000:]

    validate()
    assert not marker.exists()  # the CLI's default: no plug-in scan, so nothing loaded
    validate(PYDANTIC_DISABLE_PLUGINS="")  # the user's setting: every plug-in
    assert marker.exists()

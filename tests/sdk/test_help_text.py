"""Help and command-line errors read as `gh`, `kubectl` and `docker` do (issue 27, finding 11), checked on the
rendered help: flags show no `<bool>`, usage lines name their arguments one way, `-n` is only --namespace,
`--target k8s` works, errors about the command line do not say "invalid job", `--output` says what it takes,
and a folder given for a job file is named as a folder (finding 17)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from run_cli import cli  # tests/support

ROOT = Path(__file__).resolve().parents[2]
DIGITS = ROOT / "examples" / "digits.yaml"
COMMANDS = [
    ["validate"], ["render"], ["submit"], ["status"], ["logs"], ["cancel"], ["list"], ["schema"], ["init"],
    ["k8s", "render"], ["k8s", "apply"], ["k8s", "cp-data"], ["k8s", "status"], ["k8s", "logs"], ["k8s", "delete"], ["k8s", "list"],
]  # fmt: skip


def _cli(*args: str) -> tuple[int, str]:
    """(exit code, stdout and stderr as a terminal shows them) on a 160-column terminal without colour."""
    result = cli(*args, env={"COLUMNS": "160", "NO_COLOR": "1"}, width=160)
    return result.exit_code, result.output


@pytest.mark.parametrize("command", COMMANDS, ids=" ".join)
def test_help_shows_no_bool_metavar_and_one_usage_style(command: list[str]) -> None:
    code, out = _cli(*command, "--help")
    assert code == 0 and "<bool>" not in out, out
    usage = next(line for line in out.splitlines() if "Usage:" in line)
    for word in re.findall(r"[{\[]([^\]}]+)[}\]]", usage.split("[OPTIONS]", 1)[-1]):
        assert word in ("JOB", "RUN", "NAME", "PATH"), usage  # upper case, one name per kind of argument
    code, out = _cli("--help")
    assert "<bool>" not in out


@pytest.mark.parametrize(
    "command", [c for c in COMMANDS if c[-1] in ("validate", "render", "submit", "apply", "cp-data")]
)
def test_set_reads_the_same_in_every_help(command: list[str]) -> None:
    _, out = _cli(*command, "--help")
    (line,) = [line for line in out.splitlines() if "--set" in line]
    assert "KEY.PATH=VALUE" in line and "<list[str]>" not in line, line


def test_dash_n_is_only_namespace() -> None:
    for command in COMMANDS:
        _, out = _cli(*command, "--help")
        for line in out.splitlines():
            if re.search(r"\s-n\s", line):
                assert "--namespace" in line, (command, line)
    code, _ = _cli("list", "-L", "3")
    assert code == 0


def test_k8s_list_context_help_names_no_job() -> None:
    _, out = _cli("k8s", "list", "--help")
    assert "the job's" not in out and "default: the current one" in out


def test_target_k8s_is_kubernetes() -> None:
    code, out = _cli("validate", str(DIGITS), "--target", "k8s")
    assert code == 0 and "valid for kubernetes" in out, out
    code, out = _cli("render", str(DIGITS), "-t", "k8s")
    assert code == 0 and "kind: TrainJob" in out


@pytest.mark.parametrize(
    ("argv", "words"),
    [
        (["list", "--state", "bogus"], "--state: got 'bogus'"),
        (["render", str(DIGITS), "--target", "nowhere"], "target: got 'nowhere'"),
        (["schema", "--format", "yaml"], "--format: got 'yaml'"),
        (["validate", str(DIGITS), "--set", "novalue"], "--set 'novalue'"),
    ],
)
def test_command_line_errors_do_not_say_invalid_job(argv: list[str], words: str) -> None:
    code, out = _cli(*argv)
    assert code == 2 and words in out and "invalid job" not in out, out


def test_output_says_what_it_takes() -> None:
    code, out = _cli("validate", str(DIGITS), "--output", "true")
    assert code == 2 and "got 'true'; expected text or json" in out and "Value error" not in out, out


def test_a_folder_is_named_a_folder() -> None:
    code, out = _cli("validate", str(ROOT / "examples"))
    assert code == 2 and "is a folder" in out and "digits.yaml" in out and "no such file" not in out, out

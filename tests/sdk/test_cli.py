"""The CLI through typer's runner (fast, in-process) and through a real subprocess (entry point, imports)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import jsonschema
import pytest
import yaml
from run_cli import cli_says  # tests/support
from trainctl import Job
from trainctl.cli.schema_doc import markdown

ROOT = Path(__file__).resolve().parents[2]
DIGITS = ROOT / "examples" / "digits.yaml"
HEAVY = ("torch", "boto3", "botocore", "sagemaker", "kubernetes")


def bad_job(tmp_path: Path) -> Path:
    path = tmp_path / "bad.yaml"
    path.write_text("name: Bad_Name\ntrainer: {optimizer: adam}\nresources: {nodes: 0}\n")
    return path


# ---------------------------------------------------------------- validate, render, schema, init


def test_validate_ok_text_and_json() -> None:
    code, out, _ = cli_says("validate", str(DIGITS))
    assert code == 0 and "ok: job 'digits' is valid" in out and "world size 2" in out
    code, out, _ = cli_says("validate", str(DIGITS), "--target", "local", "--output", "json")
    assert code == 0 and json.loads(out)["job"]["resources"]["procs_per_node"] == 2


def test_validate_invalid_exits_2_naming_every_field(tmp_path: Path) -> None:
    code, out, err = cli_says("validate", str(bad_job(tmp_path)))
    assert code == 2 and out == ""
    for field in ("name:", "trainer.optimizer:", "resources.nodes:"):
        assert field in err
    assert "error:" in err and "bad.yaml" in err


def test_validate_for_a_target_checks_its_required_fields() -> None:
    code, _, err = cli_says("validate", str(DIGITS), "--target", "sagemaker")
    assert code == 2 and "sagemaker.role_arn" in err
    code, _, err = cli_says("validate", str(DIGITS), "--set", "resources.nodes=2", "--target", "local")
    assert code == 2 and "resources.nodes" in err


def test_set_overrides_and_bad_overrides() -> None:
    code, out, _ = cli_says(
        "validate", str(DIGITS), "-s", "trainer.epochs=3", "--set", "name=digits-3", "--output", "json"
    )
    assert (
        code == 0 and json.loads(out)["job"]["trainer"]["epochs"] == 3 and json.loads(out)["job"]["name"] == "digits-3"
    )
    code, _, err = cli_says("validate", str(DIGITS), "--set", "trainer.epochs=-1")
    assert code == 2 and "trainer.epochs" in err
    code, _, err = cli_says("submit", str(DIGITS), "--set", "nonsense")
    assert code == 2 and "key.path=value" in err


def test_set_mends_the_files_own_invalid_values_before_validation(tmp_path: Path) -> None:
    """`--set` is applied to the file's data, then the whole is validated (issue 27 finding 5)."""
    path = tmp_path / "Caps.yaml"
    text = DIGITS.read_text().replace("name: digits", "name: Caps")
    path.write_text(text.replace(" data/", f" {DIGITS.parent}/data/"))
    code, _, err = cli_says("validate", str(path))
    assert code == 2 and "name: got 'Caps'" in err
    code, out, err = cli_says("validate", str(path), "--set", "name=okname", "--set", "env.SEED=3")
    assert code == 0 and "ok: job 'okname'" in out, err
    code, out, _ = cli_says("render", str(path), "--set", "name=okname", "--set", "env.SEED=3", "--output", "json")
    assert code == 0 and json.loads(out)["env"]["SEED"] == "3"
    code, _, err = cli_says("validate", str(path), "--set", "name=still_Bad")
    assert code == 2 and "Caps.yaml with --set" in err and "name: got 'still_Bad'" in err


def test_render_local_stdout_file_and_json(tmp_path: Path) -> None:
    code, out, _ = cli_says("render", str(DIGITS), "--target", "local")
    assert code == 0 and out == Job.from_yaml(DIGITS).render("local").text
    code, _, err = cli_says("render", str(DIGITS), "-o", str(tmp_path / "run.sh"))
    assert code == 0 and (tmp_path / "run.sh").read_text() == out and "wrote" in err
    code, out, _ = cli_says("render", str(DIGITS), "--output", "json")
    assert json.loads(out) == Job.from_yaml(DIGITS).render("local").native


def test_render_unknown_target_suggests() -> None:
    code, _, err = cli_says("render", str(DIGITS), "--target", "locl")
    assert code == 2 and 'did you mean "local"' in err


def test_missing_job_file_exits_2(tmp_path: Path) -> None:
    code, _, err = cli_says("submit", str(tmp_path / "nope.yaml"))
    assert code == 2 and "no such file" in err


def test_schema_is_json_schema_that_accepts_the_examples_and_rejects_bad_jobs(tmp_path: Path) -> None:
    code, out, _ = cli_says("schema")
    schema = json.loads(out)
    assert code == 0 and schema["title"] == "Job"
    jsonschema.Draft202012Validator.check_schema(schema)
    for path in ROOT.glob("examples/*.yaml"):
        jsonschema.validate(yaml.safe_load(path.read_text()), schema)
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate({"name": "x", "trainer": {"epoch": 3}}, schema)
    code, _, err = cli_says("schema", "--format", "yaml")
    assert code == 2 and "--format" in err


def test_job_reference_doc_is_current() -> None:
    committed = (ROOT / "docs" / "job-reference.md").read_text()
    assert committed == markdown(), (
        "docs/job-reference.md is stale: run python -m trainctl.cli.schema_doc docs/job-reference.md"
    )
    code, out, _ = cli_says("schema", "--format", "markdown")
    assert code == 0 and out == committed
    for section in ("resources — Resources", "trainer — TrainerConfig", "secrets[] — Secret", "slurm — SlurmSection"):
        assert section in committed


def test_init_writes_a_starter_that_validates(tmp_path: Path) -> None:
    target = tmp_path / "My Job.yaml"
    code, out, _ = cli_says("init", str(target))
    assert code == 0 and "wrote" in out
    job = Job.from_yaml(target)
    assert job.name == "my-job" and job.trainer is not None and "#" in target.read_text()
    code, _, err = cli_says("init", str(target))
    assert code == 2 and "--force" in err
    code, _, _ = cli_says("init", str(target), "--force", "--name", "other")
    assert code == 0 and Job.from_yaml(target).name == "other"
    code, _, err = cli_says("init", str(tmp_path / "x.yaml"), "--name", "Not Valid")
    assert code == 2 and "name:" in err and not (tmp_path / "x.yaml").exists()


def test_the_starters_optional_lines_validate_when_uncommented(tmp_path: Path) -> None:
    """Every `# key: value` line of init's template, uncommented in place, is a field the job takes (the
    template had suggested the removed kubernetes.queue), and each target's section it shows is complete."""
    path = tmp_path / "job.yaml"
    cli_says("init", str(path))
    text = path.read_text()
    optional = re.compile(r"^( *)# (?=[a-z_]+:(?: |$))", re.MULTILINE)
    assert len(optional.findall(text)) >= 10
    job = Job.from_yaml_text(optional.sub(r"\1", text), "uncommented")
    assert job.kubernetes is not None and job.kubernetes.kueue_queue == "team-a" and job.env["SEED"] == "3"
    for target in ("local", "slurm", "kubernetes", "sagemaker"):
        job.check_target(target)


def test_the_starter_offers_code_and_command_as_the_trainers_alternative(tmp_path: Path) -> None:
    path = tmp_path / "job.yaml"
    cli_says("init", str(path))
    lines = path.read_text().splitlines()
    mine = [line.removeprefix("#   ") for line in lines if re.match(r"#   (code|command): ", line)]
    assert [line.split(":")[0] for line in mine] == ["code", "command"]
    start = lines.index("trainer:")
    end = next(i for i in range(start + 1, len(lines)) if not lines[i].startswith(" "))
    job = Job.from_yaml_text("\n".join([*lines[:start], *mine, *lines[end:]]) + "\n", "own-program")
    assert job.trainer is None and job.command == ["python", "train.py", "--epochs", "3"]
    assert job.code is not None and job.code.dir == "./src"


def test_a_long_name_moves_no_comment_of_the_starter(tmp_path: Path) -> None:
    short, long = tmp_path / "a.yaml", tmp_path / "a-much-longer-file-name.yaml"
    cli_says("init", str(short), "--name", "a")
    cli_says("init", str(long), "--name", "a-much-longer-name-than-the-comments-expect")
    pairs = zip(*(p.read_text().splitlines() for p in (short, long)), strict=True)
    differ = [(line, other) for line, other in pairs if line != other.replace(long.name, short.name)]
    assert differ == [("name: a", "name: a-much-longer-name-than-the-comments-expect")]
    for line in long.read_text().splitlines():  # the file's name ends its line wherever it appears
        assert long.name not in line or line.rstrip().endswith((long.name, "--target local", "--wait")), line


# ---------------------------------------------------------------- run commands without runs


def test_list_empty_and_filters() -> None:
    code, out, err = cli_says("list")
    assert code == 0 and out == "" and "no runs yet" in err
    code, out, _ = cli_says("list", "--output", "json")
    assert code == 0 and json.loads(out) == []
    code, _, err = cli_says("list", "--state", "finished")
    assert code == 2 and "--state" in err
    code, _, err = cli_says("list", "--target", "aws")
    assert code == 2 and "--target" in err


@pytest.mark.parametrize("command", ["status", "logs", "cancel"])
def test_unknown_and_malformed_run_ids_exit_2(command: str) -> None:
    code, _, err = cli_says(command, "local:20200101-000000-none-0000")
    assert code == 2 and "no such local run" in err
    code, _, err = cli_says(command, "no-colon")
    assert code == 2 and "<target>:<id>" in err


def test_list_shows_recorded_runs_text_and_json() -> None:
    from trainctl import Run
    from trainctl.runs.store import RunStore

    reg = RunStore()
    reg.record(Run(target="slurm", native_id="42", job_name="big", created_at=time.time() - 7200), state="running")
    reg.record(Run(target="local", native_id="x-1", job_name="small"), state="succeeded")
    code, out, _ = cli_says("list")
    assert code == 0 and out.index("local:x-1") < out.index("slurm:42") and "2h" in out
    code, out, _ = cli_says("list", "--target", "slurm", "--output", "json")
    assert [r["id"] for r in json.loads(out)] == ["slurm:42"] and json.loads(out)[0]["state"] == "running"


def test_a_slurm_run_lists_while_submit_waits_for_it_and_after_the_wait_gives_up(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 37: `list --target slurm` said 'no runs yet'. submit(..., wait=True) (docs/slurm.md) waited inside the
    engine, before the run was recorded: while it waited nothing listed, and a wait that timed out (or a
    notebook interrupted) left a job on the cluster that no trainctl command knew."""
    from trainctl.runs.state import RunRef, RunState, RunStatus
    from trainctl.targets.slurm import engine
    from trainctl.targets.slurm.target import SlurmTarget

    listed: list[list[str]] = []

    def running(run: RunRef) -> RunStatus:
        _, out, _ = cli_says("list", "--target", "slurm", "--output", "json")
        listed.append([r["id"] for r in json.loads(out)])
        return RunStatus(state=RunState.RUNNING)

    def sbatch(job: Job, wait: bool = False, timeout: float | None = None, poll: float = 2.0) -> RunRef:
        run = RunRef(target="slurm", native_id="7", job_name=job.name)
        if wait:  # what the engine did before: wait in it, before the runner recorded the run
            engine.wait_for(run, timeout=timeout, poll=poll)
        return run

    monkeypatch.setattr(engine, "submit", sbatch)
    monkeypatch.setattr(engine, "status", running)  # the engine's own wait_for and the target's status
    monkeypatch.setattr(SlurmTarget, "status", lambda self, run: running(run))
    job = Job(name="w", command=["python", "-c", "pass"], slurm={"workdir": str(tmp_path)})
    with pytest.raises(Exception, match="slurm:7 still running after"):
        job.submit("slurm", wait=True, timeout=0.2, poll=0.05)
    assert listed and all(ids == ["slurm:7"] for ids in listed)  # listed while submit waited
    code, out, _ = cli_says("list", "--target", "slurm")
    assert code == 0 and "slurm:7" in out and "running" in out


def test_a_filter_that_leaves_nothing_says_so() -> None:
    from trainctl import Run
    from trainctl.runs.store import RunStore

    RunStore().record(Run(target="local", native_id="x-1"), state="succeeded")
    code, out, err = cli_says("list", "--target", "slurm")
    assert code == 0 and out == "" and "no slurm runs are recorded here" in err and "no runs yet" not in err


def test_version() -> None:
    code, out, _ = cli_says("--version")
    assert code == 0 and re.fullmatch(r"trainctl \d+\.\d+\.\d+\S*\n", out)


# ---------------------------------------------------------------- a real subprocess


def trainctl_cmd() -> list[str]:
    script = Path(sys.executable).parent / "trainctl"
    assert script.is_file(), "the trainctl console script is not installed (pip install -e .)"
    return [str(script)]


def test_help_in_a_subprocess_loads_no_engine_library_and_is_quick(tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONPROFILEIMPORTTIME": "1"}
    for args in (["--help"], ["k8s", "--help"], ["submit", "--help"]):
        started = time.perf_counter()
        result = subprocess.run(
            [sys.executable, "-m", "trainctl", *args], capture_output=True, text=True, env=env, timeout=60
        )
        elapsed = time.perf_counter() - started
        assert result.returncode == 0, result.stderr[-2000:]
        imported = {
            line.rsplit("|", 1)[-1].strip() for line in result.stderr.splitlines() if line.startswith("import time:")
        }
        assert "typer" in imported  # the import log was read
        heavy = sorted(m for m in imported if m.split(".")[0] in HEAVY)
        assert not heavy, f"trainctl {' '.join(args)} imported {heavy[:5]}"
        assert elapsed < 10, f"trainctl {' '.join(args)} took {elapsed:.1f}s"
    assert "submit" in subprocess.run([*trainctl_cmd(), "--help"], capture_output=True, text=True, check=True).stdout


def test_invalid_job_in_a_subprocess_exits_2_without_traceback(tmp_path: Path) -> None:
    result = subprocess.run([*trainctl_cmd(), "validate", str(bad_job(tmp_path))], capture_output=True, text=True)
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert "resources.nodes" in result.stderr and result.stdout == ""
    result = subprocess.run([*trainctl_cmd(), "render", str(DIGITS), "-t", "local"], capture_output=True, text=True)
    assert result.returncode == 0 and result.stdout.startswith("#!/bin/sh")


def test_list_reads_local_runs_every_time_and_asks_other_engines_on_refresh(trainctl_home: Path) -> None:
    """A local run's state is files on this machine, so `list` reads it (before, a finished local run listed as
    `queued` until a `status`); a SLURM run keeps its last known state until --refresh asks scontrol."""
    from trainctl import Run
    from trainctl.runs.state import Paths
    from trainctl.runs.store import RunStore
    from trainctl.targets.processes import write_json

    run_dir = trainctl_home / "runs" / "20260101-000000-done-0000"
    run_dir.mkdir(parents=True)
    write_json(run_dir / "spec.json", {"argv": ["true"], "output_dir": str(run_dir / "output")})
    write_json(run_dir / "exit.json", {"state": "succeeded", "exit_code": 0, "reason": ""})
    store = RunStore()
    store.record(Run(target="local", native_id=run_dir.name, paths=Paths(run_dir=str(run_dir))), state="queued")
    store.record(Run(target="slurm", native_id="42", created_at=1.0), state="running")
    code, out, _ = cli_says("list", "--state", "succeeded", "--output", "json")
    assert code == 0 and [r["id"] for r in json.loads(out)] == [f"local:{run_dir.name}"], out
    code, out, _ = cli_says("list", "--output", "json")
    assert {r["id"]: r["state"] for r in json.loads(out)}["slurm:42"] == "running"  # not asked
    code, out, _ = cli_says("status", f"local:{run_dir.name}")
    assert code == 0 and "succeeded" in out and "exit 0" in out

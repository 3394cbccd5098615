"""`validate` checks what `submit` checks without an engine (issue 27, finding 1), and the Python API refuses a bad
job as kindly as the CLI does (finding 3): one function (preflight.check) behind validate, Job.check and submit."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from run_cli import cli_says  # tests/support
from trainctl import Job
from trainctl.errors import JobError


def _write(folder: Path, job: dict[str, object]) -> Path:
    path = folder / "job.yaml"
    path.write_text(yaml.safe_dump(job))
    return path


def _both_refuse(path: Path, words: str, *target: str) -> None:
    """validate and submit both exit 2 naming the same problem; nothing was submitted."""
    code, out, err = cli_says("validate", str(path), *target)
    assert code == 2 and words in err and out == "", err
    code, _, sub_err = cli_says("submit", str(path), *target)
    assert code == 2 and words in sub_err, sub_err


def test_inits_template_without_its_data_is_refused_by_validate_as_by_submit(
    tmp_path: Path, trainctl_home: Path
) -> None:
    code, out, _ = cli_says("init", str(tmp_path / "job.yaml"))
    assert code == 0
    _both_refuse(tmp_path / "job.yaml", "data.train:")
    _both_refuse(tmp_path / "job.yaml", "does not exist", "--target", "local")
    assert not any((trainctl_home / "runs").glob("*"))  # nothing was started
    # init says how to make the data; done so, validate says ok
    make = out.split("`")[1].split()
    assert make[:3] == ["python", "-m", "trainer.examples.digits_data"]
    subprocess.run([sys.executable, *make[1:]], check=True, capture_output=True, timeout=120)
    code, out, _ = cli_says("validate", str(tmp_path / "job.yaml"))
    assert code == 0 and "valid for local" in out


def test_a_missing_code_folder_is_refused_by_plain_validate(tmp_path: Path, trainctl_home: Path) -> None:
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "train.py").write_text("print('hi')\n")
    path = _write(tmp_path, {"name": "c", "code": "./srcc", "command": ["python", "train.py"]})
    _both_refuse(path, "code.dir:")


@pytest.mark.parametrize("with_code", [True, False])
def test_a_misspelled_script_is_refused_by_validate(tmp_path: Path, trainctl_home: Path, with_code: bool) -> None:
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "train.py").write_text("print('hi')\n")
    job: dict[str, object] = {"name": "c", "command": ["python", "trian.py"]}
    if with_code:
        job["code"] = "./src"
    else:
        (tmp_path / "train.py").write_text("print('hi')\n")
    path = _write(tmp_path, job)
    _both_refuse(path, "command[1]: 'trian.py'", "--target", "local")
    if with_code:  # the bundle goes to every target: checked for each, with the name it probably meant
        code, _, err = cli_says("validate", str(path), "--target", "slurm")
        assert code == 2 and 'did you mean "train.py"' in err
    fixed = _write(tmp_path, {**job, "command": ["python", "train.py"]})
    code, out, _ = cli_says("validate", str(fixed))
    assert code == 0 and "is valid for local" in out


def test_job_check_is_validate_in_python(tmp_path: Path) -> None:
    job = Job(name="c", command=["python", "nothere.py"])
    with pytest.raises(JobError, match=r"command\[1\]"):
        job.check()
    with pytest.raises(ValueError, match=r"command\[1\]"):  # not pydantic's deprecated classmethod
        job.validate()
    Job(name="c", command=["python", "-m", "http.server"]).check("local")


def test_job_constructor_gives_the_friendly_error() -> None:
    with pytest.raises(ValueError) as caught:  # except ValueError keeps working
        Job(name="Bad_Name", resources={"procs_per_nodes": 2}, command=["python", "-m", "x"])
    assert isinstance(caught.value, JobError)
    text = str(caught.value)
    assert "name: got 'Bad_Name'" in text and 'did you mean "procs_per_node"' in text
    assert "pydantic" not in text and "Extra inputs" not in text


@pytest.mark.parametrize("command", ["validate", "submit"])
def test_output_json_writes_errors_as_json(tmp_path: Path, command: str) -> None:
    """Finding 12: a script that asked for JSON reads a refusal as JSON too: field, value, message, exit code."""
    import json

    path = _write(tmp_path, {"name": "Bad_Name", "command": ["python", "-m", "x"], "resources": {"nodes": 0}})
    code, out, _ = cli_says(command, str(path), "--output", "json")
    assert code == 2
    error = json.loads(out)["error"]
    assert error["exit_code"] == 2 and error["type"] == "JobError" and "invalid job" in error["message"]
    by_field = {p["field"]: p for p in error["problems"]}
    assert by_field["name"]["value"] == "'Bad_Name'" and "lowercase" in by_field["name"]["message"]
    assert by_field["resources.nodes"]["value"] == "0"


def test_an_unknown_built_in_model_is_refused_by_validate(tmp_path: Path, trainctl_home: Path) -> None:
    """Issue 37: `--set trainer.model=resnet50` said ok, and the run failed 12 s later."""
    path = _write(tmp_path, {"name": "m", "trainer": {"model": "digts"}, "data": {"train": "/d/train.jsonl"}})
    _both_refuse(path, "trainer.model: got 'digts'; no built-in model of that name (did you mean \"digits\"?)")
    code, _, err = cli_says("validate", str(path), "--set", "trainer.model=resnet50", "--target", "slurm")
    assert code == 2 and "expected one of digits, mlp-regression, or your own" in err, err


@pytest.mark.parametrize("layout", ["mymodel.py", "mymodel/__init__.py", "mymodel/nets.py"])
def test_a_model_module_missing_from_the_code_folder_is_refused(
    tmp_path: Path, trainctl_home: Path, layout: str
) -> None:
    """`model: mymodle:build`, a typo for a module of `code:`, is refused with the name it probably meant."""
    (tmp_path / "src" / layout).parent.mkdir(parents=True, exist_ok=True)
    (tmp_path / "src" / layout).write_text("def build(config):\n    return None\n")
    meant = layout.removesuffix(".py").removesuffix("/__init__").replace("/", ".")
    job = {"name": "m", "code": "./src", "trainer": {"model": "mymodle:build"}, "data": {"train": "/d/t.jsonl"}}
    path = _write(tmp_path, job)
    code, _, err = cli_says("validate", str(path), "--target", "slurm")
    assert code == 2 and "trainer.model: module 'mymodle' is not in the code folder" in err, err
    assert f'did you mean "{meant.split(".")[0]}"?' in err or f'did you mean "{meant}"?' in err
    fixed = _write(tmp_path, {**job, "trainer": {"model": f"{meant}:build"}})
    code, out, err = cli_says("validate", str(fixed), "--target", "slurm")
    assert code == 0 and "is valid for slurm" in out, err
    image_own = _write(tmp_path, {**job, "trainer": {"model": "trainer.examples.nets:build"}})  # the image's package
    assert cli_says("validate", str(image_own), "--target", "slurm")[0] == 0


def test_a_build_function_missing_from_its_module_is_refused(tmp_path: Path, trainctl_home: Path) -> None:
    """`model: mymodel:buld`, a typo for the module's function, is refused naming it; names a module gets by import,
    assignment or under `if`/`try` count, and a module that may hide its names (`import *`) is left alone."""
    src = tmp_path / "src"
    src.mkdir()
    (src / "mymodel.py").write_text(
        "from nets import make as alias\ntry:\n    import torch\nexcept ImportError:\n    torch = None\n"
        "if True:\n    def build(config):\n        return None\nLATER = 1\n"
    )
    (src / "star.py").write_text("from mymodel import *\n")
    job = {"name": "m", "code": "./src", "trainer": {"model": "mymodel:buld"}, "data": {"train": "/d/t.jsonl"}}
    code, _, err = cli_says("validate", str(_write(tmp_path, job)), "--target", "slurm")
    assert code == 2 and "trainer.model: 'mymodel' (mymodel.py in the code folder) defines no 'buld'" in err, err
    assert 'did you mean "build"?' in err, err
    for fine in ("mymodel:build", "mymodel:alias", "mymodel:LATER", "star:anything"):
        code, out, err = cli_says(
            "validate", str(_write(tmp_path, {**job, "trainer": {"model": fine}})), "--target", "slurm"
        )
        assert code == 0 and "is valid for slurm" in out, (fine, err)

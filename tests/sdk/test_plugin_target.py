"""A fifth target is one package and one entry point, with no edit inside trainctl (issue 23).

tests/sdk/toy_target is such a package, as another project would write it (TorchX's `torchx.schedulers`
entry points are the anchor: torchx/schedulers/__init__.py). The test installs it with pip into a folder of
its own (`--target`; the test venv is not changed) and runs the trainctl CLI with that folder on PYTHONPATH:
its section joins the job spec, and render, submit, status, logs and list work for it."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
JOB = """\
name: hello-toy
command: [sh, -c, 'echo "world from $TOY_WHO"']
env: {TOY_WHO: the toy target}
toy:
  greeting: hello from the toy section
"""


@pytest.fixture(scope="module")
def toy_site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """trainctl-toy installed into its own folder, as `pip install --target` lays it out (with its metadata)."""
    work = tmp_path_factory.mktemp("toy")
    shutil.copytree(HERE / "toy_target", work / "src")
    site = work / "site"
    pip = [sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--no-build-isolation", "--no-index"]
    done = subprocess.run([*pip, "--target", str(site), str(work / "src")], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert (next(site.glob("trainctl_toy-*.dist-info")) / "entry_points.txt").read_text().count("toy =") == 1
    return site


def trainctl(*args: str, site: Path | None, home: Path, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "TRAINCTL_HOME": str(home), "COLUMNS": "200"}
    env.pop("PYTHONPATH", None)
    if site is not None:
        env["PYTHONPATH"] = str(site)
    return subprocess.run(
        [sys.executable, "-m", "trainctl", *args], capture_output=True, text=True, env=env, cwd=cwd, timeout=120
    )


def test_a_toy_target_from_another_package_renders_submits_and_reports(toy_site: Path, tmp_path: Path) -> None:
    home, job = tmp_path / "home", tmp_path / "job.yaml"
    job.write_text(JOB)

    def cli(*args: str, site: Path | None = toy_site) -> subprocess.CompletedProcess[str]:
        return trainctl(*args, site=site, home=home, cwd=tmp_path)

    helped = cli("submit", "--help")
    assert "kubernetes, local, sagemaker, slurm or toy" in " ".join(helped.stdout.split()), helped.stdout
    # its section registered itself with the spec: checked like any other, with the field's name
    bad = tmp_path / "bad.yaml"
    bad.write_text(JOB.replace("greeting:", "greting:"))
    refused = cli("validate", str(bad))
    assert refused.returncode == 2 and "toy.greting" in refused.stderr, refused.stderr
    schema = json.loads(cli("schema").stdout)
    assert "toy" in schema["properties"], sorted(schema["properties"])

    rendered = cli("render", str(job), "--target", "toy")
    assert rendered.returncode == 0, rendered.stderr
    assert "export TOY_GREETING='hello from the toy section'" in rendered.stdout
    assert "exec sh -c 'echo \"world from $TOY_WHO\"'" in rendered.stdout
    trainer_job = cli("render", str(HERE.parents[1] / "examples" / "digits.yaml"), "-t", "toy")
    assert trainer_job.returncode == 2 and "the toy target runs a command: job only" in trainer_job.stderr

    submitted = cli("submit", str(job), "--target", "toy", "--output", "json")
    assert submitted.returncode == 0, submitted.stderr
    record = json.loads(submitted.stdout)
    run_id = record["id"]
    assert run_id.startswith("toy:hello-toy-") and record["handle"]["pid"] > 0 and record["handle"]["shell"] == "sh"
    assert record["provenance"]["spec_sha256"] and record["paths"]["log"].endswith("log.txt")

    deadline = time.monotonic() + 60
    while True:
        status = json.loads(cli("status", run_id, "--output", "json").stdout)
        if status["state"] != "running" or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    assert status["state"] == "succeeded" and status["exit_code"] == 0, status
    assert status["handle"] == record["handle"] and status["job_name"] == "hello-toy"
    assert cli("logs", run_id).stdout.splitlines() == ["hello from the toy section", "world from the toy target"]
    listed = json.loads(cli("list", "--refresh", "--output", "json").stdout)
    assert [(r["id"], r["state"]) for r in listed] == [(run_id, "succeeded")]

    # uninstalled again: the run still lists, its handle kept as it was recorded; the target is unknown
    gone = json.loads(cli("list", "--output", "json", site=None).stdout)
    assert gone[0]["id"] == run_id and gone[0]["handle"] == record["handle"]
    unknown = cli("render", str(job), "--target", "toy", site=None)
    assert unknown.returncode == 2 and "toy" in unknown.stderr


def test_a_plugin_imports_from_one_module() -> None:
    """Every trainctl name the toy target uses comes from `trainctl.targets.api`, the plug-in surface."""
    import ast

    sources = sorted((HERE / "toy_target" / "trainctl_toy").glob("*.py"))
    imported = {
        node.module
        for f in sources
        for node in ast.walk(ast.parse(f.read_text()))
        if isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] == "trainctl"
    }
    assert imported == {"trainctl.targets.api"}, imported


API_PROBE = """
import sys
from trainctl.targets.api import TargetPlugin, TargetSection
loaded = sorted(m for m in ("trainctl.spec.job_spec", "trainctl.targets.base", "trainctl.runs.state") if m in sys.modules)
import importlib, trainctl.targets.api as api
assert sorted(api.__all__) == sorted(api._HOME), "__all__ and the names' homes differ"
for name in api.__all__:
    assert getattr(api, name) is getattr(importlib.import_module(api._HOME[name]), name), name
try:
    api.Nope
except AttributeError as exc:
    print(loaded, exc)
"""


def test_the_plugin_surface_loads_only_what_a_declaration_names() -> None:
    """A declaration's `from trainctl.targets.api import TargetPlugin, TargetSection` loads neither JobSpec (trainctl
    imports declarations while it builds JobSpec) nor `Target` or the run records; every name resolves to its home's."""
    env = {**os.environ, "PYTHONPATH": str(HERE.parents[1] / "sdk")}
    done = subprocess.run([sys.executable, "-c", API_PROBE], env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip() == "[] module 'trainctl.targets.api' has no attribute 'Nope'", done.stdout

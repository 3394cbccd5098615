"""`code:` on the local target: the example folder runs from the run's own unpacked copy (2 processes).

Editing the folder during the run changes nothing; the registry, `trainctl status` and the run's
output carry the three hashes.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest
from run_cli import trainctl  # tests/support
from trainctl import Job, Run
from trainctl.runs.provenance import spec_sha256
from trainctl.submit.bundle import bundle_for

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.slow


def test_example_folder_runs_from_its_bundle_and_reports_what_ran(tmp_path: Path, cleanup_runs: list[object]) -> None:
    folder = tmp_path / "code-job"
    shutil.copytree(ROOT / "examples" / "code-job", folder)
    job = Job.from_yaml(folder / "job.yaml")
    bundle = bundle_for(job)
    assert bundle is not None
    rendered = job.render("local")
    assert f"sha256 {bundle.sha256}" in rendered.text and "code.tar.gz" in rendered.text
    run = job.submit(target="local")
    cleanup_runs.append(run)
    (folder / "src" / "helper.py").write_text('raise SystemExit("edited during the run")\n')
    status = run.wait(timeout=180, poll=0.5)
    log = "\n".join(run.logs())
    assert status.state.value == "succeeded", log
    run_dir = Path(run.paths.run_dir)
    result = json.loads((run_dir / "output" / "result.json").read_text())
    assert result["greeting"] == "hello from helper.py" and result["world_size"] == 2
    assert result["code_dir"] == str(run_dir / "work") and result["code_sha256"] == bundle.sha256
    assert f"code sha256 {bundle.sha256} verified" in log

    shown = trainctl("status", run.id)
    assert shown.returncode == 0, shown.stderr
    for value in (bundle.sha256, spec_sha256(job), "trainctl_version"):
        assert value in shown.stdout
    as_json = json.loads(trainctl("status", run.id, "--output", "json").stdout)["provenance"]
    assert as_json["code_sha256"] == bundle.sha256 and as_json["spec_sha256"] == spec_sha256(job)
    assert as_json["image"].startswith("none (local python ")
    assert Run.from_id(run.id).provenance.model_dump() == as_json


def test_a_bundle_changed_after_render_is_refused_by_the_launcher(tmp_path: Path) -> None:
    """The rendered argv and env, run as the local runner runs them, with the folder edited after render:
    exit 2 naming both hashes, and train.py never runs."""
    folder = tmp_path / "code-job"
    shutil.copytree(ROOT / "examples" / "code-job", folder)
    job = Job.from_yaml(folder / "job.yaml")
    native = job.render("local").native
    rendered_sha = native["code"]["sha256"]
    (folder / "src" / "helper.py").write_text("GREETING = 'changed'\n")
    changed = bundle_for(Job.from_yaml(folder / "job.yaml"))
    assert changed is not None and changed.sha256 != rendered_sha
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / "code.tar.gz").write_bytes(changed.data)
    env = {k: v.replace("${TRAINCTL_RUN_DIR}", str(run_dir)) for k, v in native["env"].items()}
    done = subprocess.run(
        native["argv"], cwd=run_dir, env={"PATH": "/usr/bin:/bin", **env}, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 2, done.stderr
    assert rendered_sha in done.stderr and changed.sha256 in done.stderr and "Nothing was started" in done.stderr
    assert not any((run_dir / "work").glob("*")) and not (run_dir / "output").exists()

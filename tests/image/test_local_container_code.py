"""`code:` with `local.container: podman`: the example's folder runs in the job's image (tests/conftest.py
builds it) from its verified bundle, 2 processes, as user 10001 on a read-only root; a bundle that
changed after render is refused by the image's launcher before anything starts."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.slow
REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    home = tmp_path / "home"
    monkeypatch.setenv("TRAINCTL_HOME", str(home))
    return home


def _code_job(trainer_image: Any, folder: Path) -> Any:
    from trainctl import Job

    shutil.copytree(REPO / "examples" / "code-job", folder)
    job = Job.from_yaml(folder / "job.yaml")
    return job.with_overrides([f"image={trainer_image.ref}", f"local.container={trainer_image.runtime}"])


def _has(argv: list[str], words: list[str]) -> bool:
    return any(argv[i : i + len(words)] == words for i in range(len(argv)))


def test_code_job_runs_in_the_image_from_its_bundle(trainer_image: Any, home: Path, tmp_path: Path) -> None:
    from trainctl.submit.bundle import bundle_for

    folder = tmp_path / "code-job"
    job = _code_job(trainer_image, folder)
    bundle = bundle_for(job)
    assert bundle is not None
    argv = job.render("local").native["argv"]
    assert _has(argv, ["--user", "10001:10001"]) and _has(argv, ["--read-only"]), argv
    helper = (folder / "src" / "helper.py").read_text()
    run = job.submit(target="local")
    (folder / "src" / "helper.py").write_text('raise SystemExit("edited during the run")\n')
    final = run.wait(timeout=600, poll=1.0)
    log = "\n".join(run.logs())
    assert final.state.value == "succeeded", log[-3000:]
    assert f"code sha256 {bundle.sha256} verified; running from /workspace/code/src" in log
    result = json.loads((Path(run.paths.output_dir) / "result.json").read_text())
    assert result["greeting"] == "hello from helper.py" and result["world_size"] == 2, result
    assert result["code_dir"] == "/workspace/code/src" and result["code_sha256"] == bundle.sha256
    unpacked = Path(run.paths.run_dir) / "code" / "src"
    assert (unpacked / "helper.py").read_text() == helper, "the run's own copy, not the edited folder"
    owners = {p.stat().st_uid for p in (unpacked, unpacked / "train.py", Path(run.paths.output_dir) / "result.json")}
    assert owners == {10001}, "the launcher unpacked and the trainer wrote as the image's user"
    assert run.handle.container.image_id == trainer_image.id
    assert run.provenance.code_sha256 == bundle.sha256
    assert run.provenance.image == trainer_image.ref
    left = subprocess.run(
        [trainer_image.runtime, "ps", "--all", "--filter", f"label=io.trainctl.run={run.native_id}", "-q"],
        capture_output=True,
        text=True,
    )
    assert left.stdout.split() == [], "the container is removed after the run"
    print(f"local container code job: world {result['world_size']}, code sha256 {bundle.sha256[:12]} verified")


def test_a_bundle_changed_after_render_is_refused_in_the_image(trainer_image: Any, tmp_path: Path) -> None:
    """The rendered `podman run` argv, run as rendered with the folder edited after render: the image's
    launcher exits 2 naming both hashes, and neither the code nor the trainer's output appears."""
    from trainctl import Job
    from trainctl.submit.bundle import bundle_for
    from trainctl.targets.local import container_runtime

    folder = tmp_path / "code-job"
    job = _code_job(trainer_image, folder)
    native = job.render("local").native
    rendered_sha = native["code"]["sha256"]
    (folder / "src" / "helper.py").write_text("GREETING = 'changed'\n")
    changed = bundle_for(Job.from_yaml(folder / "job.yaml"))
    assert changed is not None and changed.sha256 != rendered_sha
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / "code.tar.gz").write_bytes(changed.data)
    container_runtime.give_to_trainer([str(run_dir / d) for d in ("output", "checkpoints", "work", "code")])
    run_id = f"codeship-tampered-{os.getpid()}"

    def sub(word: str) -> str:
        return word.replace("${TRAINCTL_RUN_DIR}", str(run_dir)).replace("${TRAINCTL_RUN_ID}", run_id)

    argv = [sub(w) for w in native["argv"]]
    env = {**os.environ, **{k: sub(v) for k, v in native["env"].items()}}
    try:
        done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=300)
    finally:
        subprocess.run([trainer_image.runtime, "rm", "--force", f"trainctl-{run_id}"], capture_output=True)
    said = done.stdout + done.stderr
    assert done.returncode == 2, said[-3000:]
    assert rendered_sha in said and changed.sha256 in said and "Nothing was started" in said
    assert list((run_dir / "code").iterdir()) == [] and list((run_dir / "output").iterdir()) == []


PROBE = """import json, os, sys
from pathlib import Path
import tinypkg, torch
if os.environ["RANK"] == "0":
    seen = {"tinypkg": tinypkg.VALUE, "torch": torch.__version__, "prefix": sys.prefix, "world": os.environ["WORLD_SIZE"]}
    (Path(os.environ["TRAINER_OUTPUT_DIR"]) / "venv.json").write_text(json.dumps(seen))
"""


def test_code_requirements_go_into_a_venv_in_the_runs_code_folder(
    trainer_image: Any, home: Path, tmp_path: Path, make_wheel: Any
) -> None:
    """requirements (a wheel in the bundle, no index): the image's launcher builds the venv under the
    writable /workspace/code on the read-only root; the program sees the wheel and the image's torch."""
    from trainctl import Job

    src = tmp_path / "src"
    (src / "wheels").mkdir(parents=True)
    make_wheel(src / "wheels", "tinypkg", "0.3")
    (src / "requirements.txt").write_text("--no-index\n--find-links wheels\ntinypkg==0.3\n")
    (src / "probe.py").write_text(PROBE)
    job = Job.model_validate(
        {
            "name": "code-venv",
            "image": trainer_image.ref,
            "code": {"dir": str(src), "requirements": "requirements.txt"},
            "command": ["python", "probe.py"],
            "resources": {"procs_per_node": 2},
            "local": {"container": trainer_image.runtime},
        }
    )
    run = job.submit(target="local")
    final = run.wait(timeout=600, poll=1.0)
    log = "\n".join(run.logs())
    assert final.state.value == "succeeded", log[-3000:]
    seen = json.loads((Path(run.paths.output_dir) / "venv.json").read_text())
    assert seen["tinypkg"] == "0.3" and seen["torch"].startswith("2.13.0") and seen["world"] == "2", seen
    assert seen["prefix"].startswith("/workspace/code/venvs/"), seen
    venvs = Path(run.paths.run_dir) / "code" / "venvs"
    assert [p.stat().st_uid for p in venvs.iterdir() if p.is_dir()] == [10001], list(venvs.iterdir())

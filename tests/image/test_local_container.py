"""`local.container: podman`: the local target runs the job's image for real (tests/conftest.py builds
it): digits in 2 processes as user 10001 on a read-only root, status/logs --follow/cancel as for
processes, the image id recorded, and bad input ending in exit 1 with the runtime's words."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.slow
REPO = Path(__file__).resolve().parents[2]
TRAINCTL = [sys.executable, "-m", "trainctl"]


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    home = tmp_path / "home"
    monkeypatch.setenv("TRAINCTL_HOME", str(home))
    return home


def _job(trainer_image: Any, *overrides: str) -> Any:
    from trainctl import Job

    job = Job.from_yaml(REPO / "examples/digits.yaml")
    return job.with_overrides([f"image={trainer_image.ref}", f"local.container={trainer_image.runtime}", *overrides])


def _containers(runtime: str, run_id: str) -> list[str]:
    out = subprocess.run(
        [runtime, "ps", "--all", "--filter", f"label=io.trainctl.run={run_id}", "--format", "{{.Names}}"],
        capture_output=True,
        text=True,
    )
    return out.stdout.split()


def test_trains_digits_in_the_image_as_10001(trainer_image: Any, home: Path) -> None:
    run = _job(trainer_image).submit(target="local")
    final = run.wait(timeout=600, poll=1.0)
    log = "\n".join(run.logs())
    assert final.state.value == "succeeded", log[-3000:]
    assert run.handle.container.image_id == trainer_image.id, "the run records the image id it ran"
    assert final.images.same == trainer_image.id, "status reports it as on every target"
    assert f"(id {trainer_image.id})" in log
    out = Path(run.paths.output_dir)
    summary = json.loads((out / "summary.json").read_text())
    assert summary["world_size"] == 2 and summary["val_accuracy"] > 0.9, summary
    assert summary["checkpoint"].startswith("/workspace/checkpoints/")
    assert {p.stat().st_uid for p in out.iterdir()} == {10001}
    assert _containers(trainer_image.runtime, run.native_id) == [], "the container is removed after the run"
    print(f"local container: image {trainer_image.id[:12]} val_accuracy {summary['val_accuracy']:.4f}")


def test_logs_follow_and_cancel(trainer_image: Any, home: Path) -> None:
    run = _job(trainer_image, "trainer.epochs=400", "checkpoint.every_steps=20").submit(target="local")
    lines: list[str] = []
    follower = threading.Thread(target=lambda: lines.extend(run.logs(follow=True)), daemon=True)
    follower.start()
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline and not any("step 30/" in line for line in lines):
        time.sleep(0.5)
    assert run.status().state.value == "running", lines[-20:]
    assert _containers(trainer_image.runtime, run.native_id), "a container runs the job"
    run.cancel()
    follower.join(60)
    assert not follower.is_alive(), "logs --follow ends when the run ends"
    assert run.status().state.value == "cancelled"
    text = "\n".join(lines)
    assert "sending SIGTERM" in text and "run cancelled" in text
    assert any("checkpoint /workspace/checkpoints/" in line for line in lines)
    assert _containers(trainer_image.runtime, run.native_id) == []


def _cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*TRAINCTL, *args], capture_output=True, text=True, timeout=300, env=env or dict(os.environ), cwd=REPO
    )


def _no_runs(home: Path) -> None:
    listed = _cli("list", "--output", "json")
    assert listed.returncode == 0 and json.loads(listed.stdout or "[]") == [], listed.stdout
    assert not list((home / "runs").glob("*")) if (home / "runs").exists() else True


def test_image_not_on_this_machine(trainer_image: Any, home: Path) -> None:
    got = _cli(
        *("submit", "examples/digits.yaml", "--target", "local"),
        *("--set", f"local.container={trainer_image.runtime}", "--set", "image=localhost/trainctl-nothing:0"),
    )
    assert got.returncode == 1, got.stderr
    assert "image localhost/trainctl-nothing:0 is not on this machine" in got.stderr
    assert "image not known" in got.stderr or "No such image" in got.stderr, "the runtime's own words"
    assert "scripts/image.sh build" in got.stderr
    _no_runs(home)


def test_missing_runtime(trainer_image: Any, home: Path, tmp_path: Path) -> None:
    bare = tmp_path / "bin"
    bare.mkdir()
    (bare / "python").symlink_to(sys.executable)
    env = {**os.environ, "PATH": str(bare)}
    got = _cli("submit", "examples/digits.yaml", "--target", "local", "--set", "local.container=podman", env=env)
    assert got.returncode == 1, got.stderr
    assert "podman is not installed" in got.stderr and "setup-containers.sh" in got.stderr
    _no_runs(home)


def test_container_that_cannot_be_created(trainer_image: Any, home: Path, tmp_path: Path) -> None:
    """A checkpoint folder with a ':' makes an invalid volume: the runtime refuses, nothing is recorded."""
    got = _cli(
        *("submit", "examples/digits.yaml", "--target", "local"),
        *("--set", f"local.container={trainer_image.runtime}", "--set", f"image={trainer_image.ref}"),
        *("--set", f"checkpoint.dir={tmp_path}/a:b"),
    )
    assert got.returncode == 1, got.stderr
    assert f"{trainer_image.runtime} could not create the container" in got.stderr
    assert "nothing was started" in got.stderr
    _no_runs(home)

"""Fixtures shared by more than one test area."""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


def _release_requeued(job_id: str) -> None:
    """Start a requeued SLURM job now instead of after SLURM's ~2 min requeue hold.

    Not within the second of the requeue: slurmd revokes the old run's credential by time stamp (1 s
    resolution), and a relaunch in that same second is killed as "Job credential revoked".
    """
    deadline = time.monotonic() + 30
    completing = ["sinfo", "-h", "-t", "completing", "-o", "%N"]
    while time.monotonic() < deadline and subprocess.run(completing, capture_output=True, text=True).stdout.strip():
        time.sleep(0.3)
    time.sleep(2.0)
    subprocess.run(["scontrol", "update", f"JobId={job_id}", "StartTime=now"], timeout=30)


@pytest.fixture
def release_requeued() -> Callable[[str], None]:
    return _release_requeued


@dataclass(frozen=True)
class TrainerImage:
    """The cpu trainer image built for this test session."""

    ref: str  # localhost/trainctl-trainer:<version>-cpu
    id: str  # the engine's image id (sha256 hex), recorded by every run
    runtime: str  # podman or docker
    build_s: float


@pytest.fixture(scope="session")
def trainer_image() -> TrainerImage:
    """`scripts/image.sh build --flavor cpu`, once per session (seconds when nothing changed).

    A missing engine fails the test (scripts/setup-containers.sh installs podman); only an
    explicit TRAINCTL_SKIP_IMAGE=1 skips, for a machine that cannot run containers at all.
    """
    if os.environ.get("TRAINCTL_SKIP_IMAGE") == "1":
        pytest.skip("TRAINCTL_SKIP_IMAGE=1: the trainer image is not built in this session")
    runtime = os.environ.get("TRAINCTL_CONTAINER_RUNTIME") or ("podman" if shutil.which("podman") else "docker")
    assert shutil.which(runtime), f"{runtime} is not installed: run scripts/setup-containers.sh"
    start = time.monotonic()
    run = subprocess.run(
        ["bash", str(REPO / "scripts/image.sh"), "build", "--flavor", "cpu"],
        capture_output=True,
        text=True,
        timeout=1800,
    )
    assert run.returncode == 0, run.stderr[-4000:]
    ref = run.stdout.strip().splitlines()[-1]
    image_id = subprocess.run(
        [runtime, "image", "inspect", ref, "--format", "{{.Id}}"], capture_output=True, text=True, check=True
    ).stdout.strip()
    return TrainerImage(ref=ref, id=image_id, runtime=runtime, build_s=time.monotonic() - start)

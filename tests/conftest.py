"""Fixtures shared by more than one test area."""

from __future__ import annotations

import subprocess
import time
from collections.abc import Callable

import pytest


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

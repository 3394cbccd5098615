"""Shared fixtures for the reliability tests: trial counts, clean environments, process helpers.

`RELIABILITY_TRIALS` sets how many seeded trials each fault test runs (default 2, which keeps the
area within its CI budget); `RELIABILITY_SEED` picks the seed; `RELIABILITY_REPORT` names a JSONL
file each test appends its figures to (trials run, survived, lost) for docs/reliability.md.
"""

from __future__ import annotations

import json
import os
import random
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import procs  # tests/support (on sys.path through tests/conftest.py)
import pytest
from cluster_faults import env_of
from trainctl.targets.processes import alive, descendants  # the local target cancels with these
from trainer.launcher.platforms import without_platform

PY = sys.executable


def trials(default: int = 2) -> int:
    """How many seeded trials a fault test runs (the issue's full figure is 20)."""
    return max(1, int(os.environ.get("RELIABILITY_TRIALS", default)))


def seed() -> int:
    return int(os.environ.get("RELIABILITY_SEED", "20261121"))


def rng(name: str) -> random.Random:
    """A per-test random source: the same seed gives the same trials."""
    return random.Random(f"{seed()}:{name}")


def report(name: str, **figures: Any) -> None:
    """Print a test's figures and append them to $RELIABILITY_REPORT when set."""
    line = json.dumps({"test": name, "trials_env": os.environ.get("RELIABILITY_TRIALS"), **figures})
    print(line)
    path = os.environ.get("RELIABILITY_REPORT")
    if path:
        with open(path, "a") as fh:
            fh.write(line + "\n")


def clean_env(tmp: Path, **extra: str) -> dict[str, str]:
    """This process's environment without platform variables (a CI runner may itself be a SLURM job)."""
    env = {k: v for k, v in without_platform(os.environ).items() if not k.startswith("TRAINER_")}
    env.update({"TRAINER_SAGEMAKER_ROOT": str(tmp / "no-sagemaker"), "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"})
    env.update(extra)
    return env


@pytest.fixture(scope="session")
def regression_data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """256 records of a noisy linear target: 16 steps per epoch at batch 8 on 2 ranks."""
    out = tmp_path_factory.mktemp("regression") / "train.jsonl"
    r = random.Random(0)
    with open(out, "w") as fh:
        for _ in range(256):
            x = [round(r.uniform(-1, 1), 6) for _ in range(8)]
            fh.write(json.dumps({"x": x, "y": round(sum(x) * 0.5 + r.gauss(0, 0.05), 6)}) + "\n")
    return out


def wait_for(predicate: Callable[[], bool], timeout: float, what: str, poll: float = 0.02) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(poll)
    raise AssertionError(f"timed out after {timeout:g}s waiting for {what}")


def workers(launcher_pid: int) -> dict[int, int]:
    """rank -> pid of the live `trainer.train` workers under a launcher."""
    out: dict[int, int] = {}
    for pid in descendants(launcher_pid):
        if "trainer.train" in procs.cmdline(pid) and alive(pid):
            rank = env_of(pid).get("RANK")
            if rank is not None:
                out[int(rank)] = pid
    return out

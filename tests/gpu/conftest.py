"""The GPU tests' shared pieces: the skip without CUDA, clean environments, data, and the launcher.

Every test here is marked `gpu` and skipped, with the reason shown, where torch sees no CUDA device
(CI). scripts/gpu-check.sh runs them on a GPU machine with `--confcutdir tests/gpu`, so the repo-wide
conftest (SLURM clusters, the SDK) is not needed there: only the trainer, installed from this tree.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import torch
from digits import make_digits  # tests/support
from trainer.launcher.platforms import without_platform

PY = sys.executable
CUDA = torch.cuda.is_available()
GPUS = torch.cuda.device_count() if CUDA else 0
NO_CUDA = f"no CUDA device (torch {torch.__version__}: torch.cuda.is_available() is False); scripts/gpu-check.sh runs these on a GPU"
gpu = [pytest.mark.gpu, pytest.mark.skipif(not CUDA, reason=NO_CUDA)]
"""Each module's `pytestmark`."""


def gpu_env(tmp: Path, **extra: str) -> dict[str, str]:
    """The test process's environment without platform or trainer variables, unbuffered."""
    env = {k: v for k, v in without_platform(os.environ).items() if not k.startswith("TRAINER_")}
    env.update(TRAINER_SAGEMAKER_ROOT=str(tmp / "no-sagemaker"), PYTHONUNBUFFERED="1", **extra)
    return env


def launcher(*train_args: str) -> list[str]:
    """`trainer-launch`, one process per GPU, around `python -m trainer.train ARGS`."""
    return [PY, "-m", "trainer.launch", "--nproc-per-node", str(GPUS), "--", PY, "-m", "trainer.train", *train_args]


def digits_args(data: Path, out: Path, *more: str) -> list[str]:
    """3 epochs of digits, 32 a step per GPU, evaluated after every epoch."""
    return [
        "--model", "digits", "--train-data", str(data / "train.jsonl"), "--val-data", str(data / "val.jsonl"),
        "--epochs", "3", "--batch-size", "32", "--lr", "0.01", "--seed", "7", "--checkpoint-every", "1000",
        "--log-every", "4", "--output-dir", str(out), *more,
    ]  # fmt: skip


def run(cmd: list[str], env: dict[str, str], timeout: float = 300) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout)
    sys.stderr.write(proc.stderr[-1500:])  # the run's tail in the test's captured output
    return proc


def summary(out: Path) -> dict[str, Any]:
    return dict(json.loads((out / "summary.json").read_text()))


def train_records(out: Path) -> list[dict[str, Any]]:
    lines = (out / "metrics.jsonl").read_text().splitlines()
    return [r for r in map(json.loads, lines) if r["kind"] == "train"]


def newest_state(out: Path) -> Path:
    root = out / "checkpoints"
    return root / (root / "latest").read_text().strip() / "state.pt"


@pytest.fixture(scope="session")
def digits(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_digits(tmp_path_factory.mktemp("digits"))


@pytest.fixture(scope="session")
def reference(digits: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One uninterrupted digits run on NCCL (fp32, `deterministic: true`, which `auto` is not on CUDA): its output
    folder. The NCCL test reads it, the CPU-load test loads its checkpoint, the SIGTERM test compares its resumed
    weights with it."""
    tmp = tmp_path_factory.mktemp("reference")
    args = digits_args(digits, tmp / "out", "--backend", "nccl", "--deterministic", "true")
    proc = run(launcher(*args), gpu_env(tmp))
    assert proc.returncode == 0, proc.stderr[-4000:]
    return tmp / "out"

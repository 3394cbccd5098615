"""Shared fixtures for the trainer tests: clean environments, digits data, process helpers."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from trainer.launcher.platforms import without_platform

PY = sys.executable


def clean_env(tmp: Path, **extra: str) -> dict[str, str]:
    """The test process's environment without any platform variables (a CI runner may be SLURM)."""
    env = {k: v for k, v in without_platform(os.environ).items() if not k.startswith("TRAINER_")}
    env["TRAINER_SAGEMAKER_ROOT"] = str(tmp / "no-sagemaker")
    env["OMP_NUM_THREADS"] = "1"
    env["PYTHONUNBUFFERED"] = "1"
    env.update(extra)
    return env


@pytest.fixture(scope="session")
def digits_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from trainer.examples.digits_data import write_digits

    out = tmp_path_factory.mktemp("digits")
    write_digits(out, 0.2, 0)
    return out


def digits_train_args(data: Path, out: Path, *more: str) -> list[str]:
    """A short digits run: 3 epochs x 23 steps of 32 per rank on 2 ranks."""
    return [
        PY, "-m", "trainer.train", "--model", "digits",
        "--train-data", str(data / "train.jsonl"), "--val-data", str(data / "val.jsonl"),
        "--epochs", "3", "--batch-size", "32", "--lr", "0.01", "--seed", "7",
        "--checkpoint-every", "8", "--keep-checkpoints", "3", "--log-every", "4",
        "--output-dir", str(out), *more,
    ]  # fmt: skip


def launch_cmd(*launcher_args: str) -> list[str]:
    return [PY, "-m", "trainer.launch", *launcher_args]


def wait_for(
    predicate: Callable[[], bool], timeout: float, what: str, proc: subprocess.Popen[str] | None = None
) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        if proc is not None and proc.poll() is not None:
            raise AssertionError(f"process exited ({proc.returncode}) before {what}")
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


def flip_tensor_byte(file: Path) -> str:
    """Flip one byte in the middle of the largest tensor stored in a torch.save file (size unchanged).

    Returns the zip member hit. torch.load still loads such a file; only the zip CRC tells.
    """
    import struct
    import zipfile

    with zipfile.ZipFile(file) as archive:
        member = max((i for i in archive.infolist() if "/data/" in i.filename), key=lambda i: i.file_size)
    assert member.compress_type == zipfile.ZIP_STORED and member.file_size > 0
    with open(file, "r+b") as fh:
        fh.seek(member.header_offset + 26)
        name_len, extra_len = struct.unpack("<HH", fh.read(4))
        pos = member.header_offset + 30 + name_len + extra_len + member.file_size // 2
        fh.seek(pos)
        byte = fh.read(1)[0]
        fh.seek(pos)
        fh.write(bytes([byte ^ 0x5A]))
    return member.filename


@pytest.fixture
def aws_env(store: Any, monkeypatch: pytest.MonkeyPatch) -> Any:
    """The environment of the module's own moto server (its `store` fixture): endpoint URL and keys."""
    for key, value in store.env().items():
        monkeypatch.setenv(key, value)
    return store

"""Shared fixtures for the trainer tests: clean environments, digits data, process helpers."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from digits import make_digits  # tests/support
from trainer import identity
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
    return make_digits(tmp_path_factory.mktemp("digits"))


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


def fsdp_train_args(data: Path, out: Path, ckpt: Path) -> list[str]:
    """FSDP with gradient accumulation and bf16 autocast: 12 optimizer steps of 64 samples, whatever the world
    size; checkpoints (sharded, torch.distributed.checkpoint) at steps 6 and 12 under `ckpt`."""
    return [
        PY, "-m", "trainer.train", "--train-data", str(data / "train.jsonl"),
        "--val-data", str(data / "val.jsonl"), "--strategy", "fsdp", "--grad-accum", "2",
        "--precision", "bf16", "--global-batch-size", "64", "--lr", "0.01", "--max-steps", "12",
        "--checkpoint-every", "6", "--log-every", "3", "--output-dir", str(out), "--checkpoint-dir", str(ckpt),
    ]  # fmt: skip


def run_folder_env(tmp: Path, run_dir: Path, uid: str) -> dict[str, str]:
    """What a submitted run's processes get: its uid and run folder, checkpoints in the folder's `checkpoints/`."""
    env = clean_env(tmp, **{identity.UID_ENV: uid, identity.RUN_DIR_ENV: str(run_dir),
                            "TRAINER_CHECKPOINT_DIR": str(run_dir / "checkpoints")})  # fmt: skip
    env.pop(identity.RESUMES_ENV, None)
    return env


def shuffled_streaming_cmd(data: Path, out: Path) -> list[str]:
    """2 ranks stream digits through a 200-record shuffle buffer: 2 epochs of 22 steps of 32 per rank, a checkpoint
    every 8 steps, all kept."""
    return launch_cmd(
        "--nproc-per-node", "2", "--",
        PY, "-m", "trainer.train", "--train-data", str(data / "train.jsonl"),
        "--val-data", str(data / "val.jsonl"), "--streaming", "true", "--shuffle-buffer", "200",
        "--epochs", "2", "--lr", "0.01", "--batch-size", "32", "--checkpoint-every", "8",
        "--keep-checkpoints", "100", "--output-dir", str(out),
    )  # fmt: skip


# Session fixtures: trainer runs that tests of several modules read. Each is listed in tests/conftest.py's
# XDIST_SESSION_FIXTURES, so under xdist the tests that use one run on one worker, which starts the run once.
# A test only reads a shared run's folders: what it deletes, changes or continues, it copies into its tmp_path.


@dataclass(frozen=True)
class SharedRun:
    """A finished trainer run: the launcher's result (each test asserts its exit), its folders."""

    proc: subprocess.CompletedProcess[str]
    out: Path  # the output dir: summary.json, metrics.jsonl, the final model
    ckpt: Path  # the checkpoint root
    trace: Path | None = None  # TRAINER_SAMPLE_TRACE, where set


@pytest.fixture(scope="session")
def fsdp_run(digits_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> SharedRun:
    """`fsdp_train_args` on 2 ranks (test_fsdp, test_resume_world_size, test_final_model)."""
    tmp = tmp_path_factory.mktemp("fsdp-run")
    out, ckpt = tmp / "a", tmp / "ckpt"
    cmd = launch_cmd("--nproc-per-node", "2", "--", *fsdp_train_args(digits_dir, out, ckpt))
    proc = subprocess.run(cmd, env=clean_env(tmp), capture_output=True, text=True, timeout=300)
    return SharedRun(proc, out, ckpt)


DIGITS_RUN_UID = "a" * 32


@pytest.fixture(scope="session")
def digits_epoch_run(digits_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> SharedRun:
    """1 digits epoch on 2 ranks with blocking checkpoints (`digits_train_args(..., "--epochs", "1",
    "--checkpoint-async", "false")`), as run DIGITS_RUN_UID in its run folder `a/` (`run_folder_env`): output in
    `a/output`, checkpoints in `a/checkpoints` (test_final_model, test_async_checkpoint, test_run_identity)."""
    tmp = tmp_path_factory.mktemp("digits-epoch-run")
    run_dir = tmp / "a"
    train = digits_train_args(digits_dir, run_dir / "output", "--epochs", "1", "--checkpoint-async", "false")
    proc = subprocess.run(launch_cmd("--nproc-per-node", "2", "--", *train), env=run_folder_env(tmp, run_dir,
                          DIGITS_RUN_UID), capture_output=True, text=True, timeout=300, cwd=tmp)  # fmt: skip
    return SharedRun(proc, run_dir / "output", run_dir / "checkpoints")


@pytest.fixture(scope="session")
def streaming_whole_run(digits_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> SharedRun:
    """`shuffled_streaming_cmd`, uninterrupted, with a sample trace (test_stream_order, test_streaming)."""
    tmp = tmp_path_factory.mktemp("streaming-whole-run")
    out, trace = tmp / "whole", tmp / "whole-trace"
    proc = subprocess.run(shuffled_streaming_cmd(digits_dir, out), env=clean_env(tmp, TRAINER_SAMPLE_TRACE=str(trace)),
                          capture_output=True, text=True, timeout=300)  # fmt: skip
    return SharedRun(proc, out, out / "checkpoints", trace)


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

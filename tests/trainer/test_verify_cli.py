"""`python -m trainer.verify`: the trainer's own choice of checkpoint, for tools outside it."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import torch
from trainer import checkpoint as ckpt

from .conftest import clean_env, flip_tensor_byte


def _write(root: Path, step: int, model: str = "digits") -> Path:
    info = ckpt.SaveInfo(step=step, epoch=0, position=step, samples=64 * step, model=model, model_args={},
                         world_size=2, strategy="ddp")  # fmt: skip
    return ckpt.write(root, info, {"model": {"w": torch.arange(4096.0)}, "rng": []}, keep=5)


def _verify(tmp: Path, *args: str) -> subprocess.CompletedProcess[str]:
    cmd = [sys.executable, "-m", "trainer.verify", *args]
    return subprocess.run(cmd, env=clean_env(tmp), capture_output=True, text=True, timeout=60)


def test_newest_that_verifies_is_chosen(tmp_path: Path) -> None:
    root = tmp_path / "ckpt"
    _write(root, 8)
    newest = _write(root, 16)
    flip_tensor_byte(newest / ckpt.STATE)
    proc = _verify(tmp_path, str(root), "--model", "digits")
    assert proc.returncode == 0, proc.stderr
    meta = json.loads(proc.stdout)
    assert meta["path"] == str(root / "step-00000008") and meta["samples"] == 512 and meta["world_size"] == 2
    assert "CRC-32 mismatch" in proc.stderr


def test_refusals_exit_2_with_a_reason(tmp_path: Path) -> None:
    root = tmp_path / "ckpt"
    _write(root, 8, model="mlp-regression")
    proc = _verify(tmp_path, str(root), "--model", "digits")
    assert proc.returncode == 2 and "written by model 'mlp-regression'" in proc.stderr
    proc = _verify(tmp_path, str(tmp_path / "empty"))
    assert proc.returncode == 2 and "no checkpoint that verifies" in proc.stderr

"""`python -m trainer.verify`: the trainer's own choice of checkpoint, for tools outside it."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import torch
from trainer.checkpoint import files as ckpt

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


def _write_with(root: Path, step: int, **settings: object) -> Path:
    """A checkpoint whose meta records the settings of a run with these non-default values."""
    from trainer.config import TrainConfig

    cfg = TrainConfig(**{"train_data": "x.jsonl", **settings})  # type: ignore[arg-type]
    info = ckpt.SaveInfo(step=step, epoch=0, position=step, samples=64 * step, model=cfg.model,
                         model_args=cfg.model_args, world_size=2, strategy=cfg.strategy,
                         config=ckpt.settings_of(cfg))  # fmt: skip
    return ckpt.write(root, info, {"model": {"w": torch.arange(8.0)}, "rng": []}, keep=5)


def test_the_resuming_runs_flags_name_each_changed_setting(tmp_path: Path) -> None:
    root = tmp_path / "ckpt"
    _write_with(root, 8, lr=0.003, epochs=2, train_data="/old/train.jsonl")
    proc = _verify(tmp_path, str(root), "--", "--model", "digits", "--lr", "0.01", "--epochs", "4",
                   "--train-data", "/new/train.jsonl", "--checkpoint-dir", "/elsewhere")  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    found = json.loads(proc.stdout)
    # paths are where things are, not how the run trains: never named
    assert found["changes"] == ["epochs 2 -> 4", "lr 0.003 -> 0.01"], found
    assert found["config"]["lr"] == 0.003 and "train_data" not in found["config"]
    same = _verify(tmp_path, str(root), "--", "--model", "digits", "--lr", "0.003", "--epochs", "2")
    assert json.loads(same.stdout)["changes"] == [], same.stderr


def test_a_change_the_saved_state_cannot_take_is_refused(tmp_path: Path) -> None:
    root = tmp_path / "ckpt"
    _write_with(root, 8, optimizer="adamw", model_args={"hidden": 32})
    for flags, named in [
        (["--optimizer", "sgd"], "optimizer adamw -> sgd"),
        (["--strategy", "fsdp"], "strategy ddp -> fsdp"),
        (["--model-args", '{"hidden":64}'], 'model_args {"hidden":32} -> {"hidden":64}'),
    ]:
        proc = _verify(tmp_path, str(root), "--", "--model", "digits", "--model-args", '{"hidden":32}', *flags)
        assert proc.returncode == 2 and named in proc.stderr and "cannot continue" in proc.stderr, proc.stderr
    proc = _verify(tmp_path, str(root), "--", "--model", "mlp-regression")
    assert proc.returncode == 2 and "written by model 'digits'" in proc.stderr


def test_a_checkpoint_from_before_settings_were_recorded_still_resumes(tmp_path: Path) -> None:
    root = tmp_path / "ckpt"
    _write(root, 8)  # no config in its meta.json
    proc = _verify(tmp_path, str(root), "--", "--model", "digits", "--lr", "0.5")
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["changes"] == []
    # its top-level strategy is still the saved state's: FSDP cannot take DDP's whole tensors
    proc = _verify(tmp_path, str(root), "--", "--model", "digits", "--strategy", "fsdp")
    assert proc.returncode == 2 and "strategy ddp -> fsdp" in proc.stderr

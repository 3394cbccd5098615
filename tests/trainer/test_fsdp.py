"""FSDP (fully_shard) with gradient accumulation and bf16 autocast; sharded checkpoints via
torch.distributed.checkpoint resume to the same weights as an uninterrupted run."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest
import torch
from torch.distributed.checkpoint.format_utils import dcp_to_torch_save

from .conftest import SharedRun, clean_env, fsdp_train_args, launch_cmd

pytestmark = pytest.mark.slow


def _run(digits: Path, out: Path, ckpt: Path, tmp: Path) -> subprocess.CompletedProcess[str]:
    cmd = launch_cmd("--nproc-per-node", "2", "--", *fsdp_train_args(digits, out, ckpt))
    return subprocess.run(cmd, env=clean_env(tmp), capture_output=True, text=True, timeout=180)


def _weights(step_dir: Path, tmp: Path) -> dict[str, torch.Tensor]:
    target = tmp / f"{step_dir.parent.name}-{step_dir.name}.pt"
    dcp_to_torch_save(step_dir / "dcp", target)
    return torch.load(target, weights_only=False)["model"]


def test_fsdp_trains_and_resumes_exactly(fsdp_run: SharedRun, digits_dir: Path, tmp_path: Path) -> None:
    """The uninterrupted run is the session's `fsdp_run` (`_run`'s command); its step-6 checkpoint, copied here,
    resumes to step 12 with the same weights."""
    full = fsdp_run.proc
    assert full.returncode == 0, full.stderr[-3000:]
    summary = json.loads((fsdp_run.out / "summary.json").read_text())
    assert summary["steps"] == 12 and summary["world_size"] == 2
    losses = [json.loads(line)["loss"] for line in (fsdp_run.out / "metrics.jsonl").read_text().splitlines()
              if json.loads(line)["kind"] == "train"]  # fmt: skip
    assert losses[-1] < losses[0]
    assert "batch 16 x accum 2" in full.stderr  # 64 / (2 ranks x 2 micro-steps)

    ckpt_b = tmp_path / "ckpt-b"
    ckpt_b.mkdir()
    shutil.copytree(fsdp_run.ckpt / "step-00000006", ckpt_b / "step-00000006")
    resumed = _run(digits_dir, tmp_path / "b", ckpt_b, tmp_path)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert json.loads((tmp_path / "b" / "summary.json").read_text())["resumed_from"] == str(ckpt_b / "step-00000006")
    a, b = _weights(fsdp_run.ckpt / "step-00000012", tmp_path), _weights(ckpt_b / "step-00000012", tmp_path)
    assert a.keys() == b.keys() and a
    for name in a:
        assert torch.equal(a[name], b[name]), name

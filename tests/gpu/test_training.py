"""The trainer on CUDA under its launcher: NCCL, AMP, FSDP, a larger model, and a GPU checkpoint read on a CPU.

One process per GPU (`--nproc-per-node` = the GPUs torch sees). On a one-GPU machine that is a world of
one: NCCL, `torch.cuda.set_device`, autocast, GradScaler and FSDP's CUDA path all run, but no collective
crosses GPUs (docs/gpu.md says what that leaves untested).
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import torch

from .conftest import GPUS, PY, digits_args, gpu, gpu_env, launcher, newest_state, run, summary, train_records

pytestmark = gpu


def test_digits_on_nccl(reference: Path) -> None:
    """The digits job with `backend: nccl` (which refuses to start without CUDA) reaches > 90%."""
    out = reference
    s = summary(out)
    assert s["world_size"] == GPUS and s["val_accuracy"] > 0.9 and s["params_in_sync"] is True, s
    assert train_records(out)[-1]["peak_mem_mb"] > 0  # torch.cuda.max_memory_allocated, so on the GPU


@pytest.mark.parametrize("precision", ["bf16", "fp16"])
def test_mixed_precision_reaches_good_accuracy(digits: Path, tmp_path: Path, precision: str) -> None:
    """bf16 autocast, and fp16 autocast with the GradScaler, whose state the checkpoint keeps."""
    out = tmp_path / "out"
    proc = run(launcher(*digits_args(digits, out, "--precision", precision)), gpu_env(tmp_path))
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert summary(out)["val_accuracy"] > 0.9, summary(out)
    scaler = torch.load(newest_state(out), map_location="cpu", weights_only=True)["scaler"]
    if precision == "fp16":  # an enabled scaler: a finite scale that has grown or backed off since 2**16
        assert 0 < scaler["scale"] < float("inf") and scaler["_growth_tracker"] >= 0, scaler
    else:
        assert scaler == {}, scaler  # bf16 needs no loss scaling: the scaler is disabled


def test_larger_model_learns_under_the_launcher(tmp_path: Path) -> None:
    """A ~19M-parameter transformer (trainer/examples/transformer.py), bf16, learns its copy task."""
    from trainer.examples.transformer import write_copy_task

    data, out = tmp_path / "data", tmp_path / "out"
    write_copy_task(data, 8192, 64, 64)
    args = [
        "--model", "trainer.examples.transformer:build",
        "--model-args", '{"vocab": 64, "seq": 64, "dim": 512, "layers": 6, "heads": 8}',
        "--train-data", str(data / "train.jsonl"), "--val-data", str(data / "val.jsonl"), "--precision", "bf16",
        "--batch-size", "64", "--epochs", "4", "--lr", "0.0005", "--warmup-steps", "50",
        "--checkpoint-every", "1000", "--log-every", "16", "--output-dir", str(out),
    ]  # fmt: skip
    proc = run(launcher(*args), gpu_env(tmp_path))
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert summary(out)["val_accuracy"] > 0.9, summary(out)


def test_fsdp_on_one_gpu_resumes_exactly(digits: Path, tmp_path: Path) -> None:
    """FSDP2 (`fully_shard`) with bf16 and grad accumulation; a resume from its DCP checkpoint at step 6
    ends with the same weights as the uninterrupted run (`deterministic: true`: auto is off on CUDA)."""
    from torch.distributed.checkpoint.format_utils import dcp_to_torch_save

    def fsdp(out: Path, ckpt: Path) -> None:
        args = [
            "--train-data", str(digits / "train.jsonl"), "--strategy", "fsdp", "--grad-accum", "2",
            "--precision", "bf16", "--batch-size", "16", "--lr", "0.01", "--max-steps", "12",
            "--checkpoint-every", "6", "--log-every", "3", "--output-dir", str(out), "--checkpoint-dir", str(ckpt),
            "--deterministic", "true",
        ]  # fmt: skip
        proc = run(launcher(*args), gpu_env(tmp_path))
        assert proc.returncode == 0, proc.stderr[-4000:]

    def weights(step_dir: Path) -> dict[str, torch.Tensor]:
        target = tmp_path / f"{step_dir.parent.name}.pt"
        dcp_to_torch_save(step_dir / "dcp", target)
        return dict(torch.load(target, weights_only=False)["model"])

    fsdp(tmp_path / "a", tmp_path / "ckpt-a")
    assert summary(tmp_path / "a")["steps"] == 12
    shutil.copytree(tmp_path / "ckpt-a" / "step-00000006", tmp_path / "ckpt-b" / "step-00000006")
    fsdp(tmp_path / "b", tmp_path / "ckpt-b")
    assert summary(tmp_path / "b")["resumed_from"] == str(tmp_path / "ckpt-b" / "step-00000006")
    a, b = weights(tmp_path / "ckpt-a" / "step-00000012"), weights(tmp_path / "ckpt-b" / "step-00000012")
    assert a.keys() == b.keys() and a
    for name in a:
        assert torch.equal(a[name], b[name]), name


def test_deterministic_auto_is_off_on_cuda_and_trains(digits: Path, tmp_path: Path) -> None:
    """The default, `deterministic: auto`, is off on CUDA (cuDNN benchmarking, non-deterministic kernels), says so
    in the log, progress.json and summary.json, and still trains; its speed-up is a figure of `bench --gpu`."""
    out = tmp_path / "out"
    proc = run(launcher(*digits_args(digits, out)), gpu_env(tmp_path))
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert "deterministic algorithms: off (auto on CUDA" in proc.stderr, proc.stderr[-4000:]
    # one rank on one GPU trains the bare model: DDP would all-reduce nothing (and split a compiled graph)
    assert ("one process on one GPU: no DDP wrapper" in proc.stderr) is (GPUS == 1), proc.stderr[-4000:]
    assert summary(out)["deterministic"] is False and summary(out)["val_accuracy"] > 0.9, summary(out)
    assert json.loads((out / "progress.json").read_text())["deterministic"] is False


def test_compiled_bf16_grad_accum_resumes_exactly(digits: Path, tmp_path: Path) -> None:
    """`compile: true` on CUDA (inductor's Triton kernels; DDP from two GPUs), bf16 and grad accumulation: no recompiles
    after the first step, checkpoints with the model's own keys, and a resume from step 6 that ends with the
    uninterrupted compiled run's weights (`deterministic: true`)."""

    def compiled(out: Path, ckpt: Path) -> dict[str, Any]:
        args = [
            *digits_args(
                digits,
                out,
                "--compile",
                "true",
                "--precision",
                "bf16",
                "--grad-accum",
                "2",
                "--max-steps",
                "12",
                "--deterministic",
                "true",
                "--checkpoint-dir",
                str(ckpt),
            )
        ]
        args[args.index("--checkpoint-every") + 1] = "6"
        proc = run(launcher(*args), gpu_env(tmp_path))
        assert proc.returncode == 0, proc.stderr[-4000:]
        assert "compiled the model in " in proc.stderr, proc.stderr[-4000:]
        found = summary(out)["compile"]
        assert found["recompiles_after_first_step"] == 0, found
        return found

    compiled(tmp_path / "a", tmp_path / "ckpt-a")
    shutil.copytree(tmp_path / "ckpt-a" / "step-00000006", tmp_path / "ckpt-b" / "step-00000006")
    compiled(tmp_path / "b", tmp_path / "ckpt-b")
    a, b = (torch.load(tmp_path / f"ckpt-{n}" / "step-00000012" / "state.pt", map_location="cpu",
                       weights_only=True)["model"] for n in ("a", "b"))  # fmt: skip
    assert a.keys() == b.keys() and a and not [k for k in a if "_orig_mod" in k], list(a)
    for name in a:
        assert torch.equal(a[name], b[name]), name


CPU_EVAL = """
import json, sys, torch
from trainer.training.models import DigitsConvNet
assert not torch.cuda.is_available()
state = torch.load(sys.argv[1], map_location="cpu", weights_only=True)
model = DigitsConvNet()
model.load_state_dict(state["model"])
rows = [json.loads(line) for line in open(sys.argv[2])]
x, y = torch.tensor([r["x"] for r in rows]), torch.tensor([r["y"] for r in rows])
with torch.no_grad():
    print((model(x).argmax(1) == y).float().mean().item())
"""


def test_gpu_checkpoint_loads_on_cpu(reference: Path, digits: Path, tmp_path: Path) -> None:
    """A checkpoint written by a CUDA run loads in a process that sees no GPU, and its weights classify."""
    state = newest_state(reference)
    saved = torch.load(state, weights_only=True)["model"]
    assert {t.device.type for t in saved.values()} == {"cuda"}  # the sync save wrote the GPU tensors as they were
    env = gpu_env(tmp_path, CUDA_VISIBLE_DEVICES="")
    child = subprocess.run([PY, "-c", CPU_EVAL, str(state), str(digits / "val.jsonl")], env=env,
                           capture_output=True, text=True, timeout=120)  # fmt: skip
    assert child.returncode == 0, child.stderr[-3000:]
    assert float(child.stdout.strip()) > 0.9, child.stdout

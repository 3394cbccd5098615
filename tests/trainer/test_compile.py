"""`compile: true` (issue 40): torch.compile of the model under DDP with grad accumulation, its checkpoints
(the model's own keys), an exact resume, no recompiles in steady state (torch's graph counter), and the
compile time in the log and summary.json. Inductor on CPU compiles C++: one 2-process run pair here; the
FSDP and bf16 variants are `long` (TRAINCTL_LONG_TESTS=1)."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest
import torch

from .conftest import PY, clean_env, launch_cmd

RECORDS = 128  # 2 ranks x 8 x accum 2 = 32 a step: 4 full steps an epoch, every batch the same shape


@pytest.fixture(scope="module")
def regression_data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("regression")
    gen = torch.Generator().manual_seed(3)
    x = torch.randn(RECORDS, 6, generator=gen)
    y = x @ torch.randn(6, generator=gen)
    with open(out / "train.jsonl", "w") as f:
        f.writelines(json.dumps({"x": row.tolist(), "y": float(t)}) + "\n" for row, t in zip(x, y, strict=True))
    return out


def train(data: Path, out: Path, ckpt: Path, tmp: Path, *more: str, nproc: int = 2) -> subprocess.CompletedProcess[str]:
    cmd = launch_cmd("--nproc-per-node", str(nproc), "--", PY, "-m", "trainer.train", "--model", "mlp-regression",
                     "--train-data", str(data / "train.jsonl"), "--batch-size", "8", "--grad-accum", "2",
                     "--epochs", "2", "--lr", "0.01", "--seed", "5", "--checkpoint-every", "4",
                     "--log-every", "2", "--compile", "true", "--output-dir", str(out),
                     "--checkpoint-dir", str(ckpt), *more)  # fmt: skip
    proc = subprocess.run(cmd, env=clean_env(tmp), capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-4000:]
    return proc


def model_state(step_dir: Path) -> dict[str, torch.Tensor]:
    return dict(torch.load(step_dir / "state.pt", map_location="cpu", weights_only=True)["model"])


@pytest.mark.slow  # torch.compile in 2 ranks, twice: 45 s in CI
def test_compiled_ddp_checkpoints_resumes_exactly_and_never_recompiles(regression_data: Path, tmp_path: Path) -> None:
    first = train(regression_data, tmp_path / "a", tmp_path / "ckpt-a", tmp_path)
    summary = json.loads((tmp_path / "a" / "summary.json").read_text())
    assert summary["steps"] == 8 and summary["params_in_sync"] is True, summary
    compiled = summary["compile"]
    assert compiled["first_step_graphs"] >= 1 and compiled["compile_s"] > 0, compiled
    assert compiled["recompiles_after_first_step"] == 0, compiled  # steady state: the graphs of step 1, reused
    assert "compiled the model in " in first.stderr and "in a first step of " in first.stderr, first.stderr[-3000:]
    # deterministic: auto, on CPU: on; the log, progress.json and summary.json say so
    assert "deterministic algorithms: on (auto on CPU" in first.stderr, first.stderr[-3000:]
    assert summary["deterministic"] is True
    assert json.loads((tmp_path / "a" / "progress.json").read_text())["deterministic"] is True

    saved = model_state(tmp_path / "ckpt-a" / "step-00000008")
    assert saved and not [k for k in saved if "_orig_mod" in k], list(saved)  # the model's own keys

    # resume the step-4 checkpoint in a fresh run: the same weights at step 8, bit for bit
    shutil.copytree(tmp_path / "ckpt-a" / "step-00000004", tmp_path / "ckpt-b" / "step-00000004")
    train(regression_data, tmp_path / "b", tmp_path / "ckpt-b", tmp_path)
    resumed = json.loads((tmp_path / "b" / "summary.json").read_text())
    assert resumed["resumed_from"] == str(tmp_path / "ckpt-b" / "step-00000004"), resumed
    assert resumed["compile"]["recompiles_after_first_step"] == 0, resumed
    again = model_state(tmp_path / "ckpt-b" / "step-00000008")
    assert again.keys() == saved.keys()
    for name, tensor in saved.items():
        assert torch.equal(again[name], tensor), name


def test_the_recompile_counter_sees_a_recompile() -> None:
    """What the steady-state figure reads: a new input shape after the first step is one more graph (so the
    test above could fail). Dynamo counts graphs whatever compiles them: the `eager` backend keeps this fast."""
    from trainer.training.compiled import CompileStats, compile_model
    from trainer.training.steps import StepDone

    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 1))
    said: list[str] = []
    stats, step = CompileStats(True, said.append), compile_model(model, backend="eager")
    assert all(k.startswith("_orig_mod.") for k in step.state_dict())  # the wrapper's keys; the loop saves `model`'s
    step(torch.randn(3, 4)).sum().backward()
    stats.on_step(StepDone(1, 0, torch.zeros(()), _timing(0.5)))
    step(torch.randn(3, 4)).sum().backward()
    steady = stats.summary()
    assert steady is not None and steady["recompiles_after_first_step"] == 0 and steady["first_step_graphs"] == 1
    step(torch.randn(6, 4)).sum().backward()  # another shape
    found = stats.summary()
    assert found is not None and found["recompiles_after_first_step"] == 1, found
    assert len(said) == 1 and said[0].startswith("compiled the model in "), said
    assert CompileStats(False, said.append).summary() is None


def _timing(wall_s: float) -> object:
    from trainer.training.steps import StepTiming

    return StepTiming(wall_s=wall_s, data_wait_s=0.0, sync_wait_s=0.0, compute_s=wall_s)


@pytest.mark.long
@pytest.mark.parametrize("more", [("--strategy", "fsdp"), ("--precision", "bf16")], ids=["fsdp", "bf16"])
def test_compiled_fsdp_and_bf16_resume_exactly(regression_data: Path, tmp_path: Path, more: tuple[str, ...]) -> None:
    train(regression_data, tmp_path / "a", tmp_path / "ckpt-a", tmp_path, *more)
    shutil.copytree(tmp_path / "ckpt-a" / "step-00000004", tmp_path / "ckpt-b" / "step-00000004")
    train(regression_data, tmp_path / "b", tmp_path / "ckpt-b", tmp_path, *more)
    for out in ("a", "b"):
        found = json.loads((tmp_path / out / "summary.json").read_text())["compile"]
        assert found["recompiles_after_first_step"] == 0, found
    a, b = (tmp_path / "ckpt-a" / "step-00000008"), (tmp_path / "ckpt-b" / "step-00000008")
    if more[0] == "--strategy":  # FSDP2 saves a DCP folder: compare through torch's own reader
        from torch.distributed.checkpoint.format_utils import dcp_to_torch_save

        dcp_to_torch_save(a / "dcp", tmp_path / "a.pt")
        dcp_to_torch_save(b / "dcp", tmp_path / "b.pt")
        left, right = (torch.load(tmp_path / f"{n}.pt", weights_only=False)["model"] for n in ("a", "b"))
    else:
        left, right = model_state(a), model_state(b)
    assert left and left.keys() == right.keys() and not [k for k in left if "_orig_mod" in k]
    for name in left:
        assert torch.equal(left[name], right[name]), name

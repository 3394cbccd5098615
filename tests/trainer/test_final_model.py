"""A finished run leaves a model you can load (issue 37 §2): the digits run's `model.safetensors` and
`model.json` load with docs/trainer.md's ten lines, run as written there with trainctl made unimportable, and
the loaded model scores the run's own val accuracy; FSDP gathers its shards into one file; tied weights, which
safetensors refuses, go to `model.pt`."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch
from final_model_doc import load_and_score
from torch import nn
from trainer.training import final_model

from .conftest import PY, SharedRun, clean_env


def test_the_digits_runs_model_loads_with_the_documented_lines(
    digits_epoch_run: SharedRun, digits_dir: Path, tmp_path: Path
) -> None:
    """The digits run is the session's `digits_epoch_run` (1 epoch on 2 ranks); the documented lines load its
    output folder from a copy here (they run beside `output/`, in a file of their own)."""
    out, proc = digits_epoch_run.out, digits_epoch_run.proc
    assert proc.returncode == 0, proc.stderr[-3000:]
    summary = json.loads((out / "summary.json").read_text())
    meta = json.loads((out / final_model.JSON_NAME).read_text())
    assert summary["model"] == str(out / final_model.SAFETENSORS_NAME) and meta["format"] == "safetensors"
    assert meta["model"] == "digits" and meta["input_shape"] == [64] and meta["step"] == summary["steps"], meta
    assert "final model: " in proc.stderr
    shutil.copytree(out, tmp_path / "output")
    accuracy = load_and_score(tmp_path / "output", digits_dir / "val.jsonl", PY, clean_env(tmp_path))
    assert accuracy == pytest.approx(summary["val_accuracy"], abs=1e-6), (accuracy, summary["val_accuracy"])


class Tied(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Embedding(7, 4)
        self.out = nn.Linear(4, 7, bias=False)
        self.out.weight = self.embed.weight


def test_tied_weights_go_to_a_plain_state_dict(tmp_path: Path) -> None:
    model = Tied()
    state = final_model.full_state_dict(model, "ddp")
    assert final_model.shares_storage(state) == [("embed.weight", "out.weight")]
    path = final_model.write(tmp_path, state, {"model": "tied"})
    meta = json.loads((tmp_path / final_model.JSON_NAME).read_text())
    assert path.name == final_model.PICKLE_NAME and meta["format"] == "torch" and meta["shared_tensors"]
    again = Tied()
    again.load_state_dict(torch.load(path, weights_only=True))
    assert torch.equal(again.out.weight, model.embed.weight)

    untied = nn.Linear(3, 2)  # the next write in the same folder replaces the model in the other form
    final_model.write(tmp_path, final_model.full_state_dict(untied, "ddp"), {"model": "linear"})
    assert sorted(p.name for p in tmp_path.iterdir()) == [final_model.JSON_NAME, final_model.SAFETENSORS_NAME]


def test_fsdp_gathers_one_full_model(fsdp_run: SharedRun) -> None:
    """The FSDP run is the session's `fsdp_run` (2 ranks, 12 steps)."""
    proc = fsdp_run.proc
    assert proc.returncode == 0, proc.stderr[-3000:]
    from safetensors.torch import load_file
    from trainer.training.models import DigitsConvNet

    loaded = load_file(str(fsdp_run.out / final_model.SAFETENSORS_NAME))

    reference = DigitsConvNet()
    assert loaded.keys() == reference.state_dict().keys()
    assert all(loaded[k].shape == v.shape for k, v in reference.state_dict().items())
    reference.load_state_dict(loaded)

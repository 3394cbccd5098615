"""Step timing: a rank that computes slowly shows it in its own compute time, and the ranks that
wait for it show the wait as time in the gradient all-reduce, not as compute (the figure a
straggler check compares across ranks). Real DDP over gloo, two processes, the Trainer's own
train_step."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

from .conftest import PY, clean_env

SLOW_S = 0.3

SLOW_MODEL = f"""
import os, time
import torch
from torch import nn

class SlowOnRank1(nn.Module):
    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(nn.Flatten(), nn.Linear(64, 32), nn.ReLU(), nn.Linear(32, 10))

    def forward(self, x):
        if self.training and os.environ["RANK"] == "1":
            time.sleep({SLOW_S})
        return self.net(x)

def build(cfg):
    return SlowOnRank1()
"""

DRIVER = """
import json, os, sys
from trainer.config import build_config
from trainer.training.loop import Trainer
trainer = Trainer(build_config(sys.argv[1:]))
batches = trainer.data.micro_batches(0, 0, 0)
timings = []
for _ in range(4):
    assert trainer.train_step(batches) is not None
    timings.append(trainer.clock.lap().__dict__)
with open(os.path.join(os.environ["TIMINGS_DIR"], f"{trainer.rank}.json"), "w") as f:  # a file: the ranks share stdout
    json.dump(timings[1:], f)  # the first step warms up
trainer.close()
"""


def test_a_slow_rank_is_slow_in_compute_and_the_others_wait_in_the_all_reduce(digits_dir: Path, tmp_path: Path) -> None:
    (tmp_path / "slow_model.py").write_text(SLOW_MODEL)
    (tmp_path / "driver.py").write_text(DRIVER)
    args = ["--model", "slow_model:build", "--train-data", str(digits_dir / "train.jsonl"), "--batch-size", "8",
            "--grad-accum", "2", "--output-dir", str(tmp_path / "out")]  # fmt: skip
    cmd = [PY, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2", str(tmp_path / "driver.py")]
    env = clean_env(tmp_path, PYTHONPATH=str(tmp_path), TIMINGS_DIR=str(tmp_path))
    proc = subprocess.run([*cmd, *args], env=env, capture_output=True, text=True, timeout=180)
    assert proc.returncode == 0, proc.stderr[-4000:]
    fast, slow = (json.loads((tmp_path / f"{rank}.json").read_text()) for rank in (0, 1))
    for f, s in zip(fast, slow, strict=True):
        # grad_accum 2: rank 1 sleeps twice per step; rank 0 waits once, in the last backward's all-reduce
        assert s["compute_s"] >= 2 * SLOW_S, (f, s)
        assert f["sync_wait_s"] >= SLOW_S, (f, s)
        assert f["compute_s"] < SLOW_S, (f, s)
        assert s["sync_wait_s"] < SLOW_S, (f, s)
        assert f["wall_s"] >= f["compute_s"] + f["sync_wait_s"] + f["data_wait_s"]


def test_only_ddp_on_the_cpu_stamps_gradients() -> None:
    """On CUDA a hook per parameter would stamp when backward was launched, and take the GIL on autograd's
    device thread each time (steps.py): the clock hooks the parameters for DDP on the CPU alone."""
    import torch
    from trainer.training.steps import stamps_gradients

    assert stamps_gradients("ddp", torch.device("cpu"))
    assert not stamps_gradients("ddp", torch.device("cuda", 0))
    assert not stamps_gradients("fsdp", torch.device("cpu"))

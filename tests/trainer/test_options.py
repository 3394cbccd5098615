"""Less common options in one real single-process run: a user model by import path, regression
records, fp16 with GradScaler, SGD, constant LR, DataLoader workers, a YAML config file."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

from .conftest import PY, clean_env


def test_user_model_regression_fp16_sgd(tmp_path: Path) -> None:
    (tmp_path / "my_models.py").write_text(
        "import torch\ntask = 'regression'\n\n"
        "def build(config):\n    return torch.nn.Sequential(torch.nn.Linear(4, 16), torch.nn.ReLU(), torch.nn.Linear(16, 2))\n"
    )
    with open(tmp_path / "reg.jsonl", "w") as fh:
        for i in range(160):
            x = [((i * 7 + j * 3) % 11) / 10 for j in range(4)]
            fh.write(json.dumps({"x": x, "y": [2 * x[0] - x[1], x[3]]}) + "\n")
    (tmp_path / "job.yaml").write_text(
        f"model: my_models:build\ntrain_data: {tmp_path / 'reg.jsonl'}\nval_data: {tmp_path / 'reg.jsonl'}\n"
        "precision: fp16\noptimizer: sgd\nlr: 0.05\nlr_schedule: constant\nnum_workers: 1\n"
        "epochs: 4\nbatch_size: 16\nlog_every: 5\n"
    )
    env = clean_env(tmp_path, PYTHONPATH=str(tmp_path))
    cmd = [PY, "-m", "trainer.train", "--config", str(tmp_path / "job.yaml"), "--output-dir", str(tmp_path / "out")]
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=180)
    assert proc.returncode == 0, proc.stderr[-3000:]
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert summary["steps"] == 40 and summary["val_accuracy"] is None
    train = [json.loads(line) for line in (tmp_path / "out" / "metrics.jsonl").read_text().splitlines()]
    losses = [r["loss"] for r in train if r["kind"] == "train"]
    assert losses[-1] < losses[0] / 2
    assert {r["lr"] for r in train if r["kind"] == "train"} == {0.05}

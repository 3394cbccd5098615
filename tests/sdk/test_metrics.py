"""`trainctl metrics`: two digits runs as a table, JSON, CSV and an overlaid PNG; a run resumed from another
(`--resume-from`) is one curve along its lineage."""

from __future__ import annotations

import csv
import io
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

pytestmark = pytest.mark.slow
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def trainctl(*args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    script = Path(sys.executable).parent / "trainctl"
    return subprocess.run([str(script), *args], capture_output=True, text=True, timeout=timeout)


def _submit(tmp_path: Path, digits_data: Path, name: str, lr: float, epochs: int, *more: str) -> str:
    job = {
        "name": name,
        "trainer": {"model": "digits", "batch_size": 32, "epochs": epochs, "lr": lr, "log_every": 5},
        "resources": {"nodes": 1, "procs_per_node": 1},
        "data": {"train": str(digits_data / "train.jsonl"), "val": str(digits_data / "val.jsonl")},
        "checkpoint": {"every_steps": 1000},
    }
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(job))
    done = trainctl("submit", str(path), "--target", "local", "--wait", *more)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return done.stderr.split("submitted ", 1)[1].split()[0]


def test_two_runs_overlay_and_a_resumed_run_is_one_curve(tmp_path: Path, digits_data: Path) -> None:
    slow = _submit(tmp_path, digits_data, "slow-lr", 0.001, 3)
    fast = _submit(tmp_path, digits_data, "fast-lr", 0.01, 3)

    png = tmp_path / "two.png"
    shown = trainctl("metrics", slow, fast, "--plot", str(png))
    assert shown.returncode == 0, shown.stderr
    assert png.read_bytes()[:8] == PNG_MAGIC and png.stat().st_size > 20_000
    lines = shown.stdout.splitlines()
    assert lines[0].split()[:4] == ["RUN", "KIND", "STEP", "EPOCH"], lines[0]
    assert {line.split()[0] for line in lines[1:]} == {slow, fast}

    rows: list[dict[str, Any]] = json.loads(trainctl("metrics", slow, fast, "--output", "json").stdout)
    for run in (slow, fast):
        evals = [r for r in rows if r["run"] == run and r["kind"] == "eval"]
        assert [r["epoch"] for r in evals] == [0, 1, 2] and all(0 <= r["val_accuracy"] <= 1 for r in evals)
    table = list(csv.DictReader(io.StringIO(trainctl("metrics", fast, "--output", "csv").stdout)))
    assert table and list(table[0])[:3] == ["run", "kind", "step"] and {r["run"] for r in table} == {fast}

    # resumed from `slow` with 2 more epochs: its rows continue slow's, at the step it resumed from
    resumed = _submit(tmp_path, digits_data, "slow-lr-more", 0.001, 5, "--resume-from", slow)
    curve: list[dict[str, Any]] = json.loads(trainctl("metrics", resumed, "--output", "json").stdout)
    train = [(r["run"], r["step"]) for r in curve if r["kind"] == "train"]
    at = max(step for run, step in train if run == slow)
    assert [run for run, _ in train] == sorted((run for run, _ in train), key=lambda r: r != slow), train
    steps = [step for _, step in train]
    assert steps == sorted(set(steps)) and any(run == resumed and step > at for run, step in train), train
    assert [r["epoch"] for r in curve if r["kind"] == "eval"] == [0, 1, 2, 3, 4]
    alone = json.loads(trainctl("metrics", resumed, "--no-lineage", "--output", "json").stdout)
    assert {r["run"] for r in alone} == {resumed} and len(alone) < len(curve)
    assert trainctl("metrics", resumed, "--plot", str(tmp_path / "resumed.png")).returncode == 0

"""A 2-process run killed mid-epoch resumes with 4 processes: the sample trace shows every sample
of the epoch trained exactly once across both runs (the order is a function of seed, epoch and
global position, not of the world size), and the run still learns. FSDP shards are resharded."""

from __future__ import annotations

import json
import shutil
import signal
import subprocess
from pathlib import Path
from typing import Any

import pytest
from trainctl.targets.processes import descendants, kill_all
from trainer.checkpoint.files import read_meta
from trainer.data.order import epoch_order

from .conftest import SharedRun, clean_env, digits_train_args, fsdp_train_args, launch_cmd, wait_for

pytestmark = pytest.mark.slow


def _rows(trace: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for f in sorted(trace.glob("rank-*.jsonl")) for line in f.read_text().splitlines()]


def test_killed_two_process_run_resumes_as_four(digits_dir: Path, tmp_path: Path) -> None:
    out, first_trace, second_trace = tmp_path / "out", tmp_path / "trace-2", tmp_path / "trace-4"
    train = digits_train_args(digits_dir, out, "--keep-checkpoints", "100")  # nothing pruned before the kill
    env = clean_env(tmp_path, TRAINER_SAMPLE_TRACE=str(first_trace))
    proc = subprocess.Popen(
        launch_cmd("--nproc-per-node", "2", "--", *train), env=env, stderr=subprocess.PIPE, text=True,
        start_new_session=True,
    )  # fmt: skip
    try:
        wait_for(lambda: (out / "checkpoints" / "step-00000016" / "meta.json").is_file(), 120, "step 16", proc)
    finally:  # the launcher and its workers (torchrun starts each in a session of its own)
        kill_all([*descendants(proc.pid), proc.pid], signal.SIGKILL)
        proc.communicate(timeout=30)
    for later in (out / "checkpoints").glob("step-*"):  # the kill's moment, fixed at step 16
        if later.name > "step-00000016":
            shutil.rmtree(later)
    (out / "checkpoints" / "latest").unlink()
    meta = read_meta(out / "checkpoints" / "step-00000016")
    assert (meta["world_size"], meta["epoch"], meta["samples"]) == (2, 0, 16 * 32 * 2)

    env = clean_env(tmp_path, TRAINER_SAMPLE_TRACE=str(second_trace))
    resumed = subprocess.run(
        launch_cmd("--nproc-per-node", "4", "--", *train), env=env, capture_output=True, text=True, timeout=300
    )
    assert resumed.returncode == 0, resumed.stderr[-4000:]
    assert "continues at global sample position 1024" in resumed.stderr
    summary = json.loads((out / "summary.json").read_text())
    assert summary["world_size"] == 4 and summary["epochs"] == 3 and summary["params_in_sync"] is True
    assert summary["val_accuracy"] > 0.9, summary
    # 413 samples left of epoch 0 on 4 ranks: 104 each, 4 batches; then 2 epochs of 12 steps
    assert summary["steps"] == 16 + 4 + 2 * 12, summary

    n = len((digits_dir / "train.jsonl").read_text().splitlines())
    order = epoch_order(n, 7, 0)
    before = [i for row in _rows(first_trace) if row["epoch"] == 0 and row["step"] < 16 for i in row["ids"]]
    after = [i for row in _rows(second_trace) if row["epoch"] == 0 for i in row["ids"]]
    assert sorted(before) == sorted(order[:1024])
    remaining = order[1024:]
    assert sorted(i for i in after if i in set(remaining)) == sorted(remaining), "a remaining sample missed or twice"
    padding = [i for i in after if i not in set(remaining)]  # the last round's fill, DistributedSampler's rule
    assert len(padding) == 4 * 104 - len(remaining) and set(padding) <= set(order[:3])
    for epoch in (1, 2):
        ids = [i for row in _rows(second_trace) if row["epoch"] == epoch for i in row["ids"]]
        assert set(ids) == set(range(n)) and len(ids) == 4 * 360


def _fsdp(digits: Path, out: Path, ckpt: Path, tmp: Path, nproc: int) -> subprocess.CompletedProcess[str]:
    cmd = launch_cmd("--nproc-per-node", str(nproc), "--", *fsdp_train_args(digits, out, ckpt))
    return subprocess.run(cmd, env=clean_env(tmp), capture_output=True, text=True, timeout=300)


def test_fsdp_checkpoint_of_two_ranks_is_resharded_onto_four(
    fsdp_run: SharedRun, digits_dir: Path, tmp_path: Path
) -> None:
    """The 2-rank run is the session's `fsdp_run` (`_fsdp`'s command, gradient accumulation and bf16 included);
    its checkpoints, copied here and cut back to step 6, resume on 4 ranks."""
    first = fsdp_run.proc
    assert first.returncode == 0, first.stderr[-3000:]
    shutil.copytree(fsdp_run.ckpt, tmp_path / "ckpt")
    shutil.rmtree(tmp_path / "ckpt" / "step-00000012")
    (tmp_path / "ckpt" / "latest").unlink()
    resumed = _fsdp(digits_dir, tmp_path / "b", tmp_path / "ckpt", tmp_path, 4)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert "continues at global sample position 384" in resumed.stderr  # 6 steps x 64
    summary = json.loads((tmp_path / "b" / "summary.json").read_text())
    assert summary["resumed_from"] == str(tmp_path / "ckpt" / "step-00000006") and summary["world_size"] == 4
    fresh, again = (
        [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
        for out in (fsdp_run.out, tmp_path / "b")
    )
    fresh_loss = {r["step"]: r["loss"] for r in fresh if r["kind"] == "train"}
    resumed_loss = {r["step"]: r["loss"] for r in again if r["kind"] == "train"}
    assert min(resumed_loss) == 9, resumed_loss  # nothing before the checkpoint was trained again
    assert resumed_loss[9] < fresh_loss[3], (fresh_loss, resumed_loss)  # the resharded weights, not new ones

"""Real two-process training with torchrun + gloo on CPU, and the faults it must survive."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

import procs  # tests/support (on sys.path through tests/conftest.py)
import pytest
import torch
from trainctl.targets.processes import descendants, kill_all
from trainer.exit_codes import EXIT_PREEMPTED

from .conftest import digits_train_args, flip_tensor_byte, launch_cmd, wait_for

pytestmark = pytest.mark.slow


PROVENANCE = {
    "image": "repo@sha256:" + "a" * 64,
    "code_sha256": "b" * 64,
    "spec_sha256": "c" * 64,
    "trainctl_version": "0",
}


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def final_weights(out: Path) -> dict[str, torch.Tensor]:
    ckpt_dir = out / "checkpoints"
    latest = (ckpt_dir / "latest").read_text().strip()
    state = torch.load(ckpt_dir / latest / "state.pt", map_location="cpu", weights_only=True)
    return state["model"]


@pytest.fixture(scope="module")
def reference(digits_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """One uninterrupted run, shared by the checks below and the fault tests' comparisons."""
    tmp = tmp_path_factory.mktemp("reference")
    from .conftest import clean_env

    env = clean_env(tmp, TRAINER_SAMPLE_TRACE=str(tmp / "trace"), TRAINCTL_PROVENANCE=json.dumps(PROVENANCE))
    cmd = launch_cmd("--nproc-per-node", "2", "--", *digits_train_args(digits_dir, tmp / "out"))
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=180)
    assert proc.returncode == 0, proc.stderr[-4000:]
    return {"out": tmp / "out", "trace": tmp / "trace", "stderr": proc.stderr}


def test_digits_trains_on_two_ranks(reference: dict[str, Any], digits_dir: Path) -> None:
    out = reference["out"]
    summary = json.loads((out / "summary.json").read_text())
    assert summary["world_size"] == 2 and summary["steps"] == 69 and summary["epochs"] == 3
    assert summary["val_accuracy"] > 0.9, summary
    assert summary["params_in_sync"] is True
    assert summary["provenance"] == PROVENANCE  # what the SDK passed: image, code and spec hashes, version
    train = [r for r in read_jsonl(out / "metrics.jsonl") if r["kind"] == "train"]
    assert train[-1]["loss"] < train[0]["loss"] / 4, (train[0]["loss"], train[-1]["loss"])
    for key in (
        "step",
        "epoch",
        "loss",
        "lr",
        "samples_per_s",
        "step_time_s",
        "data_wait_s",
        "world_size",
        "peak_mem_mb",
    ):
        assert key in train[-1]
    assert list((out / "tensorboard").glob("events.out.tfevents.*"))
    # the rank prefix on plain log lines (stderr is not a terminal here)
    assert "[rank0] epoch 2:" in reference["stderr"]


def test_ranks_see_disjoint_data_and_end_with_equal_params(reference: dict[str, Any], digits_dir: Path) -> None:
    trace = reference["trace"]
    n_train = len((digits_dir / "train.jsonl").read_text().splitlines())
    seen = {r: read_jsonl(trace / f"rank-{r}.jsonl") for r in (0, 1)}
    for epoch in range(3):
        ids = [{i for row in seen[r] if row["epoch"] == epoch for i in row["ids"]} for r in (0, 1)]
        assert not ids[0] & ids[1], f"epoch {epoch}: ranks share samples"
        assert ids[0] | ids[1] == set(range(n_train))
    orders = [[i for row in seen[0] if row["epoch"] == e for i in row["ids"]] for e in (0, 1)]
    assert orders[0] != orders[1], "set_epoch must reshuffle each epoch"
    digests = [json.loads((trace / f"rank-{r}.final.json").read_text())["params_sha256"] for r in (0, 1)]
    assert digests[0] == digests[1]


def _workers(launcher_pid: int) -> list[int]:
    return [p for p in descendants(launcher_pid) if "trainer.train" in procs.cmdline(p)]


def test_one_loss_in_progress_metrics_and_summary(reference: dict[str, Any]) -> None:
    """Issue 37: status said `loss 0.0398` (rank 0, one step) where `trainctl metrics` said 0.04362 (the
    mean over ranks and the window). The progress file and line carry the train line's loss."""
    out = reference["out"]
    train = {r["step"]: r["loss"] for r in read_jsonl(out / "metrics.jsonl") if r["kind"] == "train"}
    progress = json.loads((out / "progress.json").read_text())
    summary = json.loads((out / "summary.json").read_text())
    assert progress["step"] == 69 and progress["loss"] == train[69] == summary["final_loss"], (progress, summary)
    lines = [
        line.split("trainctl progress: ")[1] for line in reference["stderr"].splitlines() if "progress: step=" in line
    ]
    assert lines, reference["stderr"][-2000:]
    for line in lines:
        words = dict(word.split("=") for word in line.split())
        step = int(words["step"].split("/")[0])
        assert float(words["loss"]) == pytest.approx(train[step], rel=1e-5), (line, train[step])


def test_sigkill_worker_restarts_and_resumes_bit_identical(
    reference: dict[str, Any], digits_dir: Path, tmp_path: Path
) -> None:
    from .conftest import clean_env

    out = tmp_path / "out"
    cmd = launch_cmd("--nproc-per-node", "2", "--max-restarts", "1", "--", *digits_train_args(digits_dir, out))
    proc = subprocess.Popen(cmd, env=clean_env(tmp_path), stderr=subprocess.PIPE, text=True)
    try:
        wait_for(lambda: (out / "checkpoints" / "step-00000016").is_dir(), 120, "a checkpoint", proc)
        workers = _workers(proc.pid)
        assert len(workers) == 2, workers
        os.kill(workers[-1], signal.SIGKILL)
        _, stderr = proc.communicate(timeout=180)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, stderr[-4000:]
    summary = json.loads((out / "summary.json").read_text())
    assert summary["resumed_from"] is not None and summary["steps"] == 69, summary
    assert "resumed from" in stderr
    ours, theirs = final_weights(out), final_weights(reference["out"])
    assert ours.keys() == theirs.keys()
    for name in ours:
        assert torch.equal(ours[name], theirs[name]), f"{name} differs from the uninterrupted run"


def test_bit_flipped_newest_checkpoint_is_skipped_for_the_previous_one(
    reference: dict[str, Any], digits_dir: Path, tmp_path: Path
) -> None:
    """A full-size state.pt with one flipped tensor byte loads in torch.load; the zip CRC check on
    rank 0 rejects it, both ranks resume from the step before and finish bit-identical."""
    from .conftest import clean_env

    out = tmp_path / "out"
    shutil.copytree(reference["out"] / "checkpoints", out / "checkpoints")
    newest = out / "checkpoints" / "step-00000069"
    assert sorted(p.name for p in (out / "checkpoints").glob("step-*"))[-2:] == ["step-00000064", newest.name]
    size = (newest / "state.pt").stat().st_size
    flip_tensor_byte(newest / "state.pt")
    cmd = launch_cmd("--nproc-per-node", "2", "--", *digits_train_args(digits_dir, out))
    proc = subprocess.run(cmd, env=clean_env(tmp_path), capture_output=True, text=True, timeout=180)
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert (
        f"WARNING: skipping unusable checkpoint: {newest / 'state.pt'}: CRC-32 mismatch in bytes 0-{size - 1}"
        in proc.stderr
    ), proc.stderr[-4000:]
    summary = json.loads((out / "summary.json").read_text())
    assert summary["resumed_from"] == str(out / "checkpoints" / "step-00000064"), summary
    assert summary["steps"] == 69 and summary["params_in_sync"] is True, summary
    ours, theirs = final_weights(out), final_weights(reference["out"])
    for name in theirs:
        assert torch.equal(ours[name], theirs[name]), f"{name} differs from the uninterrupted run"


@pytest.mark.parametrize(
    ("target", "sig"),
    [("launcher", signal.SIGTERM), ("launcher", signal.SIGUSR1), ("one worker", signal.SIGUSR1)],
)
def test_signal_checkpoints_and_exits_preempted(
    digits_dir: Path, tmp_path: Path, target: str, sig: signal.Signals
) -> None:
    """Kubernetes/SageMaker signal PID 1 (the launcher); SLURM may signal a worker directly."""
    from trainer.checkpoint.files import read_meta

    from .conftest import clean_env

    out = tmp_path / "out"
    train = digits_train_args(digits_dir, out, "--checkpoint-every", "1000")
    cmd = launch_cmd("--nproc-per-node", "2", "--", *train)
    proc = subprocess.Popen(cmd, env=clean_env(tmp_path), stderr=subprocess.PIPE, text=True)
    try:
        wait_for(lambda: (out / "metrics.jsonl").exists(), 120, "training to start", proc)
        assert not (out / "checkpoints" / "latest").exists()
        if target == "launcher":
            proc.send_signal(sig)
        else:
            os.kill(_workers(proc.pid)[-1], sig)
        _, stderr = proc.communicate(timeout=90)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == EXIT_PREEMPTED, stderr[-4000:]
    latest = out / "checkpoints" / (out / "checkpoints" / "latest").read_text().strip()
    meta = read_meta(latest)
    assert 0 < meta["step"] < 69
    progress = json.loads((out / "progress.json").read_text())  # issue 37: not the step of a second before
    assert progress["step"] == meta["step"], (progress, meta["step"])
    assert "Traceback" not in stderr
    expected = "stop requested (" if target == "one worker" else f"stop requested ({sig.name})"
    assert expected in stderr
    assert f"preempted: checkpoint written, exit {EXIT_PREEMPTED}" in stderr


def test_workers_do_not_outlive_a_killed_launcher(digits_dir: Path, tmp_path: Path) -> None:
    """SIGKILL of the launcher alone (the OOM killer's choice, a `kill -9`): torchrun put each worker in
    a session of its own, so no signal reaches them; what ends them is their output FIFOs losing their
    reader (worker_output.py): the next line a worker writes fails, and its peers' collectives with it.
    They must not train on, unsupervised, into the checkpoints the next attempt resumes from."""
    from trainctl.targets.processes import alive

    from .conftest import clean_env

    out = tmp_path / "out"
    cmd = launch_cmd("--nproc-per-node", "2", "--", *digits_train_args(digits_dir, out, "--epochs", "50"))
    proc = subprocess.Popen(cmd, env=clean_env(tmp_path), stderr=subprocess.DEVNULL, start_new_session=True)
    workers: list[int] = []
    try:
        wait_for(lambda: (out / "checkpoints" / "step-00000016").is_dir(), 120, "a checkpoint", proc)
        workers = _workers(proc.pid)
        assert len(workers) == 2, workers
        proc.kill()
        proc.wait(timeout=30)
        deadline = time.monotonic() + 60
        while any(alive(w) for w in workers) and time.monotonic() < deadline:
            time.sleep(0.2)
        left = [w for w in workers if alive(w)]
    finally:
        kill_all([*workers, *descendants(proc.pid)], signal.SIGKILL)
    assert not left, f"workers {left} outlived their launcher by 60 s"
    newest = max((out / "checkpoints").glob("step-*"))
    assert json.loads((newest / "meta.json").read_text())["step"] < 50 * 23, "the workers trained to the end"

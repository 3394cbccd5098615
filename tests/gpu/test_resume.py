"""SIGTERM mid-run on a GPU: the launcher's workers checkpoint and exit 143; the same command resumes and
ends with weights bit-identical to the uninterrupted run's (`deterministic: true`: on CUDA the default, `auto`,
turns deterministic algorithms off)."""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

import torch
from trainer.checkpoint.files import read_meta
from trainer.exit_codes import EXIT_PREEMPTED

from .conftest import digits_args, gpu, gpu_env, launcher, newest_state, run, summary

pytestmark = gpu


def test_sigterm_checkpoints_and_the_resume_is_bit_identical(reference: Path, digits: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    cmd = launcher(*digits_args(digits, out, "--backend", "nccl", "--deterministic", "true"))
    # 20 ms a step, so the signal lands mid-run (a step of this model takes under a millisecond on a GPU)
    slowed = gpu_env(tmp_path, TRAINER_FAILPOINTS="compute=slow(20)")
    proc = subprocess.Popen(cmd, env=slowed, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 120
        while not (out / "metrics.jsonl").exists():
            assert proc.poll() is None and time.monotonic() < deadline, "training did not start"
            time.sleep(0.05)
        proc.terminate()  # SIGTERM to the launcher, as Kubernetes and SageMaker send it
        _, stderr = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == EXIT_PREEMPTED, stderr[-4000:]
    stopped_at = read_meta(newest_state(out).parent)["step"]
    total = summary(reference)["steps"]
    assert 0 < stopped_at < total, (stopped_at, total)

    resumed = run(cmd, gpu_env(tmp_path))
    assert resumed.returncode == 0, resumed.stderr[-4000:]
    s = summary(out)
    assert s["resumed_from"] is not None and s["steps"] == total, s
    ours = torch.load(newest_state(out), map_location="cpu", weights_only=True)
    theirs = torch.load(newest_state(reference), map_location="cpu", weights_only=True)
    assert ours["model"].keys() == theirs["model"].keys()
    for name, tensor in theirs["model"].items():
        assert torch.equal(ours["model"][name], tensor), (
            f"{name} differs from the uninterrupted run (stopped at {stopped_at})"
        )

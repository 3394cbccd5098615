"""Asynchronous checkpoints: one write in flight at most, a failed or killed background write
never looks complete, and a run saving in the background ends bit-identical to a blocking one."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import torch
from trainer.checkpoint import files as ckpt
from trainer.checkpoint.async_writer import BackgroundWriter, CheckpointWriteError
from trainer.exit_codes import EXIT_PREEMPTED

from .conftest import SharedRun, clean_env, digits_train_args, launch_cmd, wait_for

INFO = ckpt.SaveInfo(step=3, epoch=0, position=3, samples=96, model="m", model_args={}, world_size=1, strategy="ddp")


def test_at_most_one_write_in_flight() -> None:
    done: list[Path] = []
    writer = BackgroundWriter(lambda path, _s: done.append(path))
    release = threading.Event()
    order: list[str] = []

    def slow() -> Path:
        release.wait(10)
        order.append("first")
        return Path("a")

    writer.submit(slow)
    assert writer.in_flight
    second = threading.Thread(target=lambda: writer.submit(lambda: order.append("second") or Path("b")))
    second.start()
    time.sleep(0.2)
    assert second.is_alive() and order == [], "a second save must wait for the first"
    release.set()
    second.join(10)
    writer.wait()
    assert order == ["first", "second"] and done == [Path("a"), Path("b")]


def test_failed_background_write_leaves_nothing_that_looks_complete(tmp_path: Path) -> None:
    writer = BackgroundWriter(lambda path, _s: None)
    state = {"model": {"w": torch.ones(4)}, "rng": []}
    original = ckpt._write_complete

    def crash(tmp: Path, final: Path, meta: dict[str, object]) -> None:
        raise OSError("disk full")  # after state.pt is written and fsynced, before meta.json

    ckpt._write_complete = crash  # type: ignore[assignment]
    try:
        writer.submit(lambda: ckpt.write(tmp_path, INFO, state, keep=3))
        with pytest.raises(CheckpointWriteError, match="disk full"):
            writer.wait()
    finally:
        ckpt._write_complete = original  # type: ignore[assignment]
    assert (tmp_path / ".tmp-step-00000003" / ckpt.STATE).is_file()
    assert ckpt.candidates(tmp_path) == [] and ckpt.select(tmp_path, "auto", "m") == (None, [])
    writer.wait()  # the error was reported once


KILLED_WRITER = """
import sys, torch
from pathlib import Path
from trainer.checkpoint import files as ckpt
from trainer.checkpoint.async_writer import BackgroundWriter
root = Path(sys.argv[1])
state = {"model": {"w": torch.randn(64, 1024, 1024)}, "rng": []}
writer = BackgroundWriter(lambda path, s: print("published", path, flush=True))
for step in range(1, 1000):
    info = ckpt.SaveInfo(step=step, epoch=0, position=step, samples=step, model="m", model_args={},
                         world_size=1, strategy="ddp")
    writer.submit(lambda info=info: ckpt.write(root, info, state, keep=2))
"""


def test_killed_during_background_write_resumes_from_a_complete_one(tmp_path: Path) -> None:
    root = tmp_path / "ckpt"
    proc = subprocess.Popen(
        [sys.executable, "-c", KILLED_WRITER, str(root)], env=clean_env(tmp_path), stdout=subprocess.PIPE, text=True
    )
    try:
        assert proc.stdout is not None
        assert proc.stdout.readline().startswith("published")
        wait_for(lambda: any(root.glob(".tmp-*/state.pt")), 60, "a write in flight", proc)
        time.sleep(0.05)
    finally:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(30)
    assert list(root.glob(".tmp-*")), "the kill landed between writes; the test proves nothing"
    found = ckpt.candidates(root)
    assert found
    for path in found:  # every published one is complete and verifies
        ckpt.verify_files(path, ckpt.read_meta(path))
    chosen, warnings = ckpt.select(root, "auto", "m")
    assert chosen == found[0] and warnings == []


@pytest.mark.slow
def test_async_run_is_bit_identical_to_a_blocking_one(
    digits_epoch_run: SharedRun, digits_dir: Path, tmp_path: Path
) -> None:
    """The blocking run is the session's `digits_epoch_run` (the same arguments, `--checkpoint-async false`, with
    its checkpoints in its run folder's `checkpoints/`); the background-saving one runs here."""
    finals = {}
    for mode in ("false", "true"):
        if mode == "false":
            proc, out, root = digits_epoch_run.proc, digits_epoch_run.out, digits_epoch_run.ckpt
        else:
            out = tmp_path / mode
            root = out / "checkpoints"
            cmd = launch_cmd("--nproc-per-node", "2", "--",
                             *digits_train_args(digits_dir, out, "--epochs", "1", "--checkpoint-async", mode))  # fmt: skip
            proc = subprocess.run(cmd, env=clean_env(tmp_path), capture_output=True, text=True, timeout=180)
        assert proc.returncode == 0, proc.stderr[-4000:]
        names = sorted(p.name for p in root.glob("step-*"))
        assert names == ["step-00000008", "step-00000016", "step-00000023"], names
        if mode == "true":
            assert "written in the background" in proc.stderr
        summary = json.loads((out / "summary.json").read_text())
        assert summary["checkpoint"] == str(root / "step-00000023")
        finals[mode] = ckpt.load_state(root / "step-00000023")["model"]
    for name, tensor in finals["false"].items():
        assert torch.equal(tensor, finals["true"][name]), name


@pytest.mark.slow
def test_sigterm_waits_for_the_background_write(digits_dir: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    train = digits_train_args(digits_dir, out, "--checkpoint-async", "true", "--checkpoint-every", "2")
    proc = subprocess.Popen(launch_cmd("--nproc-per-node", "2", "--", *train), env=clean_env(tmp_path),
                            stderr=subprocess.PIPE, text=True)  # fmt: skip
    try:
        wait_for(lambda: (out / "checkpoints" / "latest").exists(), 120, "a checkpoint", proc)
        proc.send_signal(signal.SIGTERM)
        _, stderr = proc.communicate(timeout=90)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == EXIT_PREEMPTED, stderr[-4000:]
    root = out / "checkpoints"
    latest = root / (root / "latest").read_text().strip()
    assert "stop requested (SIGTERM): checkpoint written" in stderr
    assert f"checkpoint {latest} (written in the background" in stderr, "published before the exit"
    assert not list(root.glob(".tmp-*")), "the exit did not wait for the write"
    for path in ckpt.candidates(root):
        ckpt.verify_files(path, ckpt.read_meta(path))

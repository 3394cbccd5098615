"""Faults on real processes: torchrun + gloo on CPU, the tiny `mlp-regression` model.

Each test runs seeded trials (`RELIABILITY_TRIALS`, default 3); where it can, one torchrun with
`--max-restarts N` takes all N faults, so a trial costs one worker restart, not a whole launch.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import re
import signal
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch
from trainer.checkpoint.files import STEP_DIR, candidates, load_state, read_meta
from trainer.errors import CheckpointCorrupt
from trainer.exit_codes import EXIT_PREEMPTED

from .conftest import PY, alive, clean_env, report, rng, trials, workers

pytestmark = pytest.mark.slow

EVERY = 10  # checkpoint interval, steps
KEEP = 3
STEPS_PER_EPOCH = 16  # 256 records / (2 ranks x batch 8)
RESUMED = re.compile(r"resumed from (\S+) at step (\d+)")


def train_argv(data: Path, out: Path, total: int, *more: str) -> list[str]:
    return [
        PY, "-m", "trainer.train", "--model", "mlp-regression", "--train-data", str(data),
        "--batch-size", "8", "--epochs", str(math.ceil(total / STEPS_PER_EPOCH)), "--max-steps", str(total),
        "--lr", "0.01", "--seed", "11", "--checkpoint-every", str(EVERY), "--keep-checkpoints", str(KEEP),
        "--log-every", "1", "--output-dir", str(out), *more,
    ]  # fmt: skip


def launch(
    tmp: Path, out: Path, data: Path, total: int, restarts: int, *more: str, failpoints: str = ""
) -> subprocess.Popen[bytes]:
    cmd = [PY, "-m", "trainer.launch", "--nproc-per-node", "2", "--max-restarts", str(restarts), "--"]
    cmd += train_argv(data, out, total, *more)
    log = open(tmp / f"stderr-{time.monotonic_ns()}.log", "wb")  # noqa: SIM115 - closed with the process
    env = clean_env(tmp, **({"TRAINER_FAILPOINTS": failpoints} if failpoints else {}))
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=log)
    proc.log_path = Path(log.name)  # type: ignore[attr-defined]
    return proc


def stderr_of(proc: subprocess.Popen[bytes]) -> str:
    return Path(proc.log_path).read_text(errors="replace")  # type: ignore[attr-defined]


def until(proc: subprocess.Popen[bytes], predicate: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        if proc.poll() is not None:
            raise AssertionError(f"launcher exited ({proc.returncode}) before {what}:\n{stderr_of(proc)[-3000:]}")
        time.sleep(0.01)
    raise AssertionError(f"timed out after {timeout:g}s waiting for {what}:\n{stderr_of(proc)[-3000:]}")


def metric_steps(out: Path) -> list[int]:
    path = out / "metrics.jsonl"
    if not path.exists():
        return []
    steps = []
    for line in path.read_text().splitlines():
        with contextlib.suppress(ValueError, KeyError):  # a line being written
            steps.append(int(json.loads(line)["step"]))
    return steps


def grown(out: Path, lines: int) -> Callable[[], bool]:
    """True once metrics.jsonl has at least `lines` lines."""
    return lambda: len(metric_steps(out)) >= lines


def says(proc: subprocess.Popen[bytes], pattern: re.Pattern[str]) -> Callable[[], bool]:
    return lambda: bool(pattern.search(stderr_of(proc)))


def newest_complete(root: Path) -> Path | None:
    """What resume must pick: the newest step directory that reads back."""
    for path in candidates(root):
        try:
            read_meta(path)
            load_state(path)
            return path
        except CheckpointCorrupt:
            continue
    return None


def final_weights(out: Path) -> dict[str, torch.Tensor]:
    path = newest_complete(out / "checkpoints")
    assert path is not None
    model: dict[str, torch.Tensor] = load_state(path)["model"]
    return model


def assert_tidy(root: Path) -> None:
    """Only complete step directories (at most `keep`) and the `latest` pointer remain."""
    entries = sorted(p.name for p in root.iterdir())
    steps = [n for n in entries if STEP_DIR.match(n)]
    assert set(entries) - set(steps) == {"latest"}, f"leftovers in {root}: {entries}"
    assert len(steps) <= KEEP, entries
    for name in steps:
        read_meta(root / name)


def kill_generation(proc: subprocess.Popen[bytes], gen: dict[int, int], rank: int) -> None:
    os.kill(gen[rank], signal.SIGKILL)
    until(proc, lambda: not any(alive(p) for p in gen.values()), 90, "the worker group to stop")


def next_generation(proc: subprocess.Popen[bytes], old: set[int]) -> dict[int, int]:
    box: dict[int, int] = {}

    def ready() -> bool:
        box.clear()
        box.update(workers(proc.pid))
        return len(box) == 2 and not set(box.values()) & old

    until(proc, ready, 120, "two fresh workers")
    return dict(box)


_REFERENCE: dict[int, dict[str, torch.Tensor]] = {}


@pytest.fixture(scope="module")
def reference(tmp_path_factory: pytest.TempPathFactory, regression_data: Path) -> Callable[[int], dict[str, Any]]:
    """Final weights of an uninterrupted run of `total` steps (cached per length)."""

    def get(total: int) -> dict[str, Any]:
        if total not in _REFERENCE:
            tmp = tmp_path_factory.mktemp("reference")
            proc = launch(tmp, tmp / "out", regression_data, total, 0)
            assert proc.wait(timeout=300) == 0, stderr_of(proc)[-3000:]
            _REFERENCE[total] = final_weights(tmp / "out")
        return _REFERENCE[total]

    return get


def assert_bit_identical(ours: dict[str, torch.Tensor], theirs: dict[str, torch.Tensor]) -> None:
    assert ours.keys() == theirs.keys()
    for name in ours:
        assert torch.equal(ours[name], theirs[name]), f"{name} differs from the uninterrupted run"


@pytest.mark.long  # a killed worker: tests/trainer/test_train_ddp.py
def test_sigkill_random_worker_at_random_step(
    tmp_path: Path, regression_data: Path, reference: Callable[[int], dict[str, Any]]
) -> None:
    n, r = trials(), rng("sigkill-worker")
    total = 30 * n + 4 * EVERY
    out = tmp_path / "out"
    proc = launch(tmp_path, out, regression_data, total, n)
    seen: set[int] = set()
    rows: list[dict[str, Any]] = []
    try:
        for _ in range(n):
            gen = next_generation(proc, seen)
            seen |= set(gen.values())
            before = len(metric_steps(out))
            offset = r.randint(1, 2 * EVERY)
            until(proc, grown(out, before + offset), 120, f"{offset} more steps")
            rank = r.choice(sorted(gen))
            kill_generation(proc, gen, rank)
            reached = metric_steps(out)[-1]
            newest = newest_complete(out / "checkpoints")
            newest_step = read_meta(newest)["step"] if newest else 0
            rows.append({"rank": rank, "reached": reached, "newest": newest_step, "lost": reached - newest_step})
        assert proc.wait(timeout=300) == 0, stderr_of(proc)[-4000:]
    finally:
        if proc.poll() is None:
            proc.kill()
    text = stderr_of(proc)
    resumed = [int(m.group(2)) for m in RESUMED.finditer(text)]
    survived = sum(1 for row, step in zip(rows, resumed, strict=False) if step == row["newest"])
    report("sigkill-worker", trials=n, survived=survived, max_lost_steps=max(r["lost"] for r in rows),
           interval=EVERY, kills=rows)  # fmt: skip
    assert resumed == [row["newest"] for row in rows], (resumed, rows)
    for row in rows:
        assert 0 <= row["lost"] <= EVERY, row
    summary = json.loads((out / "summary.json").read_text())
    assert summary["steps"] == total and summary["params_in_sync"] is True, summary
    assert_tidy(out / "checkpoints")
    assert_bit_identical(final_weights(out), reference(total))


def test_sigkill_rank0_inside_a_checkpoint_write(
    tmp_path: Path, regression_data: Path, reference: Callable[[int], dict[str, Any]]
) -> None:
    """Rank 0 SIGKILLs itself (failpoint `crash`) at an exact line of its 2nd or 3rd checkpoint of a launch:
    inside the write (state.pt written, no meta.json) or between publish and rename (meta.json written, the
    folder not renamed). Every trial hits its window by construction; each next launch resumes from the newest
    complete checkpoint, never the half-published one, and the run ends bit-identical to an uninterrupted one."""
    n, r = trials(), rng("failpoint-rank0-write")
    total = 30 * n + 4 * EVERY
    out = tmp_path / "out"
    root = out / "checkpoints"
    rows: list[dict[str, Any]] = []
    expected = {"checkpoint-write": {"state.pt"}, "checkpoint-publish": {"state.pt", "meta.json"}}
    for _ in range(n):
        point, skip = r.choice(sorted(expected)), r.randint(1, 2)
        before = newest_complete(root)
        proc = launch(tmp_path, out, regression_data, total, 0, failpoints=f"{point}@0={skip}*off->crash")
        code = proc.wait(timeout=300)
        text = stderr_of(proc)
        assert code != 0 and f"failpoint {point} (rank 0, hit {skip + 1}): crash" in text, text[-3000:]
        (tmp,) = root.glob(".tmp-step-*")  # what the crash left: exactly one unpublished folder
        newest = newest_complete(root)
        assert newest is not None
        rows.append({"point": point, "writing": tmp.name.removeprefix(".tmp-"), "left": sorted(p.name for p in tmp.iterdir()),
                     "newest": read_meta(newest)["step"], "before": read_meta(before)["step"] if before else None})  # fmt: skip
        assert set(rows[-1]["left"]) == expected[point], rows[-1]
        assert rows[-1]["newest"] < int(rows[-1]["writing"].split("-")[1]), rows[-1]
    proc = launch(tmp_path, out, regression_data, total, 0)  # no failpoint: the run finishes
    assert proc.wait(timeout=300) == 0, stderr_of(proc)[-4000:]
    resumed = [int(m.group(2)) for m in RESUMED.finditer(stderr_of(proc))]
    report("sigkill-rank0-inside-write", trials=n, hit_write_window=n, kills=rows, final_resumed_from=resumed)
    assert resumed == [rows[-1]["newest"]], (resumed, rows)
    assert_tidy(root)
    assert_bit_identical(final_weights(out), reference(total))


def test_sigkill_rank0_by_timing_while_writing_a_checkpoint(
    tmp_path: Path, regression_data: Path, reference: Callable[[int], dict[str, Any]]
) -> None:
    """The real thing, aimed by timing (one trial; the failpoint test above hits the window every time):
    rank 0 is killed while a `.tmp-step-*` directory exists (its write window, 4-20 ms here), detected by
    polling every 0.5 ms, then killed after a random 0-4 ms. A trial "hit" the window when the temporary
    directory was still there, unrenamed, after rank 0 died; the safety property must hold either way."""
    n, r = 1, rng("sigkill-rank0-write")
    total = 30 * trials() + 4 * EVERY  # the failpoint test's length: one uninterrupted reference serves both
    out = tmp_path / "out"
    root = out / "checkpoints"
    proc = launch(tmp_path, out, regression_data, total, n)
    seen: set[int] = set()
    rows: list[dict[str, Any]] = []
    try:
        for _ in range(n):
            gen = next_generation(proc, seen)
            seen |= set(gen.values())
            before = len(metric_steps(out))
            until(proc, grown(out, before + 1), 120, "the new generation to train")
            skip = r.randint(1, 2)  # checkpoints of this generation to let through first
            appeared: list[str] = []
            present: set[str] = set()
            deadline = time.monotonic() + 120
            while len(appeared) <= skip:
                assert time.monotonic() < deadline and proc.poll() is None, stderr_of(proc)[-3000:]
                now = {p for p in os.listdir(root) if p.startswith(".tmp-")} if root.is_dir() else set()
                appeared += sorted(now - present)
                present = now
                time.sleep(0.0005)
            time.sleep(r.uniform(0, 0.004))
            kill_generation(proc, gen, 0)
            tmp = root / appeared[skip]
            final = root / appeared[skip].removeprefix(".tmp-")
            contents = {p.name: p.stat().st_size for p in tmp.iterdir()} if tmp.is_dir() else None
            newest = newest_complete(root)
            assert newest is not None
            load_state(newest)  # loadable
            rows.append({
                "writing": final.name, "hit": contents is not None, "tmp_contents": contents,
                "newest": read_meta(newest)["step"],
            })  # fmt: skip
        assert proc.wait(timeout=300) == 0, stderr_of(proc)[-4000:]
    finally:
        if proc.poll() is None:
            proc.kill()
    resumed = [int(m.group(2)) for m in RESUMED.finditer(stderr_of(proc))]
    hits = sum(row["hit"] for row in rows)
    report("sigkill-rank0-writing", trials=n, hit_write_window=hits,
           survived=sum(1 for row, s in zip(rows, resumed, strict=False) if s == row["newest"]),
           lost=0 if resumed == [row["newest"] for row in rows] else "see rows", kills=rows)  # fmt: skip
    assert resumed == [row["newest"] for row in rows], (resumed, rows)
    for row in rows:
        if row["hit"]:  # the half-written one was never resumed from
            assert row["newest"] < int(row["writing"].split("-")[1]), row
    assert_tidy(root)
    assert_bit_identical(final_weights(out), reference(total))


GRACE_S = 30.0  # Kubernetes' default terminationGracePeriodSeconds; SLURM's KillWait is 30 s too


def test_sigterm_or_sigusr1_at_random_moments_checkpoint_within_grace(tmp_path: Path, regression_data: Path) -> None:
    n, r = trials(), rng("signals")
    total = 5000  # never reached: every launch is stopped by a signal
    out = tmp_path / "out"
    rows: list[dict[str, Any]] = []
    for i in range(n):
        proc = launch(tmp_path, out, regression_data, total, 0)
        try:
            before = len(metric_steps(out))
            until(proc, grown(out, before + 1), 120, "training to start")
            time.sleep(r.uniform(0, 1.5))
            sig = r.choice([signal.SIGTERM, signal.SIGUSR1])
            to = r.choice(["launcher", "rank0", "rank1"])
            pid = proc.pid if to == "launcher" else workers(proc.pid)[int(to[-1])]
            reached = metric_steps(out)[-1]
            sent = time.time()
            os.kill(pid, sig)
            code = proc.wait(timeout=GRACE_S + 30)
            elapsed = time.time() - sent
        finally:
            if proc.poll() is None:
                proc.kill()
        newest = newest_complete(out / "checkpoints")
        meta_time = (newest / "meta.json").stat().st_mtime if newest else math.inf
        step = read_meta(newest)["step"] if newest else -1
        ok = code == EXIT_PREEMPTED and step >= reached and meta_time - sent < GRACE_S and elapsed < GRACE_S
        rows.append({"trial": i, "signal": sig.name, "to": to, "exit": code, "reached": reached,
                     "checkpoint_step": step, "seconds_to_checkpoint": round(meta_time - sent, 2),
                     "seconds_to_exit": round(elapsed, 2), "ok": ok})  # fmt: skip
    report("signal-checkpoint", trials=n, survived=sum(r["ok"] for r in rows), lost=0 if all(r["ok"] for r in rows)
           else "see rows", max_seconds_to_exit=max(r["seconds_to_exit"] for r in rows), grace_s=GRACE_S,
           rows=rows)  # fmt: skip
    assert all(row["ok"] for row in rows), rows
    assert "Traceback" not in stderr_of(proc)


def test_sigterm_before_any_checkpoint_does_not_claim_one(tmp_path: Path, regression_data: Path) -> None:
    """A SIGTERM while the workers still start up: exit 143 like any SIGTERM, but the launcher
    must not say a checkpoint was written (none exists)."""
    out = tmp_path / "out"
    proc = launch(tmp_path, out, regression_data, 5000, 0)
    try:
        until(proc, lambda: len(workers(proc.pid)) == 2, 120, "two workers")
        started = list(workers(proc.pid).values())
        os.kill(proc.pid, signal.SIGTERM)
        code = proc.wait(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    text = stderr_of(proc)
    outlived = [pid for pid in started if alive(pid)]  # a SIGTERM within torch's start-up window orphaned them once
    for pid in outlived:
        os.kill(pid, signal.SIGKILL)
    assert not outlived, f"workers {outlived} outlived the launcher\n{text[-3000:]}"
    assert newest_complete(out / "checkpoints") is None, "a checkpoint exists: the signal came too late"
    assert code == EXIT_PREEMPTED, text[-3000:]
    assert "checkpoint written" not in text, text[-3000:]
    assert "before any worker said it had saved its state" in text and "resumes" not in text, text[-3000:]

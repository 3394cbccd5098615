"""The streaming shuffle buffer and read-ahead: a resume from the saved state of any batch sees
the same sequence as an uninterrupted run; a 2-process run killed mid-epoch does too."""

from __future__ import annotations

import json
import shutil
import signal
import subprocess
import threading
from pathlib import Path
from typing import Any

import pytest
import torch
from trainctl.targets.processes import descendants, kill_all
from trainer.data.stream_order import batches, plain_state, read_ahead
from trainer.data.streaming import ShardedJsonlReader
from trainer.errors import TrainerInputError

from .conftest import SharedRun, clean_env, shuffled_streaming_cmd, wait_for


def _files(tmp: Path) -> list[Path]:
    files = []
    for f in range(2):
        path = tmp / f"part-{f}.jsonl"
        lines = [json.dumps({"x": [float(f * 1000 + i)], "y": i % 3}) for i in range(157)]
        lines.insert(40, "")  # a blank line is skipped, and must not confuse the saved offsets
        path.write_text("\n".join(lines) + "\n")
        files.append(path)
    return files


def _ids(stream: Any) -> list[list[int]]:
    return [b[2] for b in stream]


@pytest.mark.parametrize("size", [0, 1, 16, 500])
def test_a_resume_from_any_batch_continues_the_same_sequence(tmp_path: Path, size: int) -> None:
    files = _files(tmp_path)
    for rank in range(2):
        whole = list(batches(ShardedJsonlReader(files, rank, 2), 8, "classification", size, 3, 1, rank, None))
        reader_lines = {o for _, o, _ in ShardedJsonlReader(files, rank, 2).lines_from(0)}
        assert sorted(i for b in whole for i in b[2]) == sorted(reader_lines), "each line of the shard once"
        if size > 1:
            assert [i for b in whole for i in b[2]] != sorted(reader_lines), "shuffled"
        for k in (1, 5, len(whole) - 1):
            state = whole[k - 1][3]
            resumed = list(batches(ShardedJsonlReader(files, rank, 2), 8, "classification", size, 3, 1, rank, state))
            assert _ids(resumed) == _ids(whole[k:]), f"rank {rank}, resumed after batch {k}"
            assert all(torch.equal(a[0], b[0]) for a, b in zip(resumed, whole[k:], strict=True))


def test_the_order_depends_on_seed_and_epoch_only(tmp_path: Path) -> None:
    files = _files(tmp_path)

    def order(seed: int, epoch: int) -> list[list[int]]:
        return _ids(batches(ShardedJsonlReader(files, 0, 1), 8, "classification", 32, seed, epoch, 0, None))

    assert order(1, 0) == order(1, 0)
    assert order(1, 0) != order(2, 0) and order(1, 0) != order(1, 1)


def test_the_state_is_plain_data(tmp_path: Path) -> None:
    state = plain_state(
        next(batches(ShardedJsonlReader(_files(tmp_path), 0, 1), 8, "classification", 32, 1, 0, 0, None))[3]
    )
    torch.save(state, tmp_path / "s.pt")
    assert torch.load(tmp_path / "s.pt", weights_only=True) == state


def test_read_ahead_keeps_order_and_reraises_errors(tmp_path: Path) -> None:
    files = _files(tmp_path)
    direct = _ids(batches(ShardedJsonlReader(files, 0, 1), 8, "classification", 32, 1, 0, 0, None))
    assert _ids(read_ahead(batches(ShardedJsonlReader(files, 0, 1), 8, "classification", 32, 1, 0, 0, None))) == direct
    bad = tmp_path / "bad.jsonl"
    bad.write_text("\n".join([json.dumps({"x": [1.0], "y": 0})] * 20 + ['{"x": [1.0], "y": ']) + "\n")
    with pytest.raises(TrainerInputError, match=f"{bad}:21: malformed JSON line"):
        list(read_ahead(batches(ShardedJsonlReader([bad], 0, 1), 4, "classification", 8, 1, 0, 0, None)))


def test_an_abandoned_read_ahead_ends_its_thread(tmp_path: Path) -> None:
    files = _files(tmp_path)
    before = threading.active_count()
    stream = read_ahead(batches(ShardedJsonlReader(files, 0, 1), 2, "classification", 0, 1, 0, 0, None), depth=2)
    next(stream)
    stream.close()
    wait_for(lambda: threading.active_count() == before, 5, "the reader thread to end")


def _trace(trace: Path) -> dict[int, list[tuple[int, int, list[int]]]]:
    rows: dict[int, list[tuple[int, int, list[int]]]] = {}
    for rank in (0, 1):
        lines = (trace / f"rank-{rank}.jsonl").read_text().splitlines()
        rows[rank] = [(r["epoch"], r["step"], r["ids"]) for r in map(json.loads, lines)]
    return rows


@pytest.mark.slow
def test_shuffled_streaming_run_killed_and_resumed_sees_the_same_samples(
    streaming_whole_run: SharedRun, digits_dir: Path, tmp_path: Path
) -> None:
    """The uninterrupted run is the session's `streaming_whole_run` (`shuffled_streaming_cmd`, as the runs here)."""
    whole_out, whole_trace, proc = streaming_whole_run.out, streaming_whole_run.trace, streaming_whole_run.proc
    assert whole_trace is not None
    assert proc.returncode == 0, proc.stderr[-3000:]
    summary = json.loads((whole_out / "summary.json").read_text())
    assert summary["steps"] == 44 and summary["val_accuracy"] > 0.8, summary

    out, first, second = tmp_path / "out", tmp_path / "trace-1", tmp_path / "trace-2"
    killed = subprocess.Popen(shuffled_streaming_cmd(digits_dir, out), start_new_session=True,
                              env=clean_env(tmp_path, TRAINER_SAMPLE_TRACE=str(first)), stderr=subprocess.PIPE)  # fmt: skip
    try:
        wait_for(lambda: (out / "checkpoints" / "step-00000016" / "meta.json").is_file(), 120, "step 16", killed)
    finally:  # the launcher and its workers (torchrun starts each in a session of its own)
        kill_all([*descendants(killed.pid), killed.pid], signal.SIGKILL)
        killed.communicate(timeout=30)
    for later in (out / "checkpoints").glob("step-*"):  # the kill's moment: step 16, mid-epoch 0
        if later.name > "step-00000016":
            shutil.rmtree(later)
    (out / "checkpoints" / "latest").unlink()
    proc = subprocess.run(shuffled_streaming_cmd(digits_dir, out),
                          env=clean_env(tmp_path, TRAINER_SAMPLE_TRACE=str(second)),
                          capture_output=True, text=True, timeout=300)  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "resumed from" in proc.stderr and "at step 16 (epoch 0" in proc.stderr
    whole, before, after = _trace(whole_trace), _trace(first), _trace(second)
    for rank in (0, 1):
        assert [r for r in before[rank] if r[1] < 16] + after[rank] == whole[rank], f"rank {rank}: another sequence"
        assert whole[rank][0][2] != sorted(whole[rank][0][2]), "the buffer shuffles"
    ours = torch.load(out / "checkpoints" / "step-00000044" / "state.pt", weights_only=True)["model"]
    theirs = torch.load(whole_out / "checkpoints" / "step-00000044" / "state.pt", weights_only=True)["model"]
    assert all(torch.equal(ours[k], theirs[k]) for k in theirs), "weights differ from the uninterrupted run"

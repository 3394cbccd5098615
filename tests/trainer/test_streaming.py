"""The rank-sharded streaming reader: disjoint, complete, ~1/N of the bytes per rank."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest
from trainer.data.streaming import ShardedJsonlReader
from trainer.errors import TrainerInputError

from .conftest import SharedRun


def _files(tmp: Path) -> tuple[list[Path], set[tuple[Path, int]], int]:
    """Three files of records of very different lengths, with blank lines; their line starts."""
    rng = random.Random(1)
    files, starts, longest = [], set(), 0
    for f in range(3):
        path = tmp / f"part-{f}.jsonl"
        pos, chunks = 0, []
        for i in range(200 + 50 * f):
            if i % 37 == 5:
                line = "\n"
            else:
                record = {"x": [rng.random() for _ in range(5)], "y": i, "note": "n" * rng.randint(0, 400)}
                line = json.dumps(record) + "\n"
                starts.add((path, pos))
            longest = max(longest, len(line))
            chunks.append(line)
            pos += len(line.encode())
        path.write_text("".join(chunks))
        files.append(path)
    return files, starts, longest


@pytest.mark.parametrize("world", [1, 2, 3, 5, 8])
def test_ranks_read_disjoint_lines_covering_the_files(tmp_path: Path, world: int) -> None:
    files, starts, longest = _files(tmp_path)
    total = sum(p.stat().st_size for p in files)
    seen: list[set[tuple[Path, int]]] = []
    for rank in range(world):
        reader = ShardedJsonlReader(files, rank, world)
        mine = {reader.locate(offset) for _, offset, _ in reader.lines_from()}
        assert all(a.isdisjoint(mine) for a in seen), f"rank {rank} re-reads another rank's lines"
        seen.append(mine)
        # its own ~1/N share, plus at most the line straddling each end of each file span
        share = total / world
        assert share - 2 * longest <= reader.bytes_read <= share + 2 * longest * len(files), reader.bytes_read
    assert set().union(*seen) == starts


def test_skip_resumes_at_the_same_record(tmp_path: Path) -> None:
    files, _, _ = _files(tmp_path)
    reader = ShardedJsonlReader(files, 1, 3)
    whole = [i for _, _, ids in reader.batches(7, "regression") for i in ids]
    resumed = [i for _, _, ids in reader.batches(7, "regression", skip=21) for i in ids]
    assert resumed == whole[21:]


def test_malformed_line_names_file_and_line(tmp_path: Path) -> None:
    path = tmp_path / "d.jsonl"
    lines = [json.dumps({"x": [1.0], "y": 0})] * 30
    lines[22] = '{"x": [1.0], "y": '
    path.write_text("\n".join(lines) + "\n")
    errors = []
    for rank in range(2):
        try:
            list(ShardedJsonlReader([path], rank, 2).batches(4, "classification"))
        except TrainerInputError as exc:
            errors.append(str(exc))
    assert len(errors) == 1 and errors[0].startswith(f"{path}:23: malformed JSON line")


@pytest.mark.slow
def test_streaming_digits_on_two_ranks(streaming_whole_run: SharedRun) -> None:
    """The run is the session's `streaming_whole_run` (test_stream_order's uninterrupted run: digits streamed on 2
    ranks for 2 epochs, through a shuffle buffer); each rank trains on its own shard."""
    out, trace, proc = streaming_whole_run.out, streaming_whole_run.trace, streaming_whole_run.proc
    assert trace is not None
    assert proc.returncode == 0, proc.stderr[-3000:]
    summary = json.loads((out / "summary.json").read_text())
    assert summary["steps"] == 44 and summary["params_in_sync"] is True  # 2 x (719 // 32) per rank
    assert summary["val_accuracy"] > 0.8
    rows = [(trace / f"rank-{r}.jsonl").read_text().splitlines() for r in (0, 1)]
    ids = [{i for line in lines for i in json.loads(line)["ids"]} for lines in rows]
    assert ids[0] and ids[1] and ids[0].isdisjoint(ids[1])

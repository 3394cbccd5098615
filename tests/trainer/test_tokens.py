"""Token shards (issue 40, part 5): llm.c's `.bin` layout of uint16 ids, read by memory map, the same samples
as the JSONL records they were converted from, sharded by rank through the map-style data path."""

from __future__ import annotations

import json
import pickle
import subprocess
from pathlib import Path

import numpy as np
import pytest
import torch
from trainer.data.jsonl import ExampleDataset, read_examples
from trainer.data.tokens import HEADER_BYTES, MAGIC, TokenDataset, is_token_data, main, read_header, write_shard
from trainer.errors import TrainerInputError
from trainer.examples.transformer import write_copy_task

from .conftest import PY, clean_env, launch_cmd


def test_the_header_is_llm_cs_and_samples_are_x_then_the_next_token(tmp_path: Path) -> None:
    write_shard(tmp_path / "a.bin", np.arange(12), 4)  # 3 samples of 3 ids + the next one
    write_shard(tmp_path / "b.bin", np.arange(100, 108), 4)
    header = np.fromfile(tmp_path / "a.bin", dtype=np.int32, count=256)
    assert list(header[:4]) == [MAGIC, 1, 12, 4] and not header[4:].any()  # llm.c: magic, version, tokens
    assert np.array_equal(np.fromfile(tmp_path / "a.bin", dtype=np.uint16, offset=HEADER_BYTES), np.arange(12))
    data = TokenDataset([tmp_path / "a.bin", tmp_path / "b.bin"], "train_data")
    assert len(data) == 5
    x, y, ids = data[[4, 0, 2]]  # across both shards, in the order asked
    assert x.dtype == torch.int64 and x.tolist() == [[104, 105, 106], [0, 1, 2], [8, 9, 10]]
    assert y.tolist() == [107, 3, 11] and ids.tolist() == [4, 0, 2]
    one = data[3]
    assert one[0].tolist() == [100, 101, 102] and int(one[1]) == 103
    assert pickle.loads(pickle.dumps(data)).maps is None  # a DataLoader worker opens its own maps


def test_a_converted_shard_holds_the_jsonl_samples(tmp_path: Path) -> None:
    write_copy_task(tmp_path / "j", 40, 8, 30, seed=4, val=4)
    write_copy_task(tmp_path / "t", 40, 8, 30, seed=4, val=4, tokens=True)
    assert main([str(tmp_path / "j" / "train.jsonl"), str(tmp_path / "conv.bin")]) == 0
    jsonl = ExampleDataset(read_examples([tmp_path / "j" / "train.jsonl"], "classification", "train_data"))
    order = [7, 0, 39, 12]
    want_x, want_y, _ = jsonl[order]
    for shard in (tmp_path / "t" / "train.bin", tmp_path / "conv.bin"):
        x, y, _ = TokenDataset([shard], "train_data")[order]
        assert torch.equal(x, want_x.long()) and torch.equal(y, want_y), shard
    assert read_header(tmp_path / "t" / "val.bin", "val_data") == (4 * 9, 9)
    raw = tmp_path / "raw.bin"  # nanoGPT's train.bin: uint16 ids, no header
    np.arange(10, dtype=np.uint16).tofile(raw)
    assert main([str(raw), str(tmp_path / "r.bin"), "--raw", "4"]) == 0
    assert TokenDataset([tmp_path / "r.bin"], "train_data")[[1]][0].tolist() == [[4, 5, 6]]


def test_bad_shards_are_refused_naming_the_file(tmp_path: Path) -> None:
    (tmp_path / "notes.bin").write_bytes(b"\0" * 2000)
    with pytest.raises(TrainerInputError, match=r"notes\.bin is not a token shard"):
        TokenDataset([tmp_path / "notes.bin"], "train_data")
    write_shard(tmp_path / "cut.bin", np.arange(8), 4)
    with open(tmp_path / "cut.bin", "r+b") as f:
        f.truncate(HEADER_BYTES + 10)
    with pytest.raises(TrainerInputError, match=r"cut\.bin is 1034 bytes, its header says 8 tokens"):
        TokenDataset([tmp_path / "cut.bin"], "train_data")
    write_shard(tmp_path / "a.bin", np.arange(8), 4)
    write_shard(tmp_path / "b.bin", np.arange(9), 3)
    with pytest.raises(TrainerInputError, match="different sample lengths"):
        TokenDataset([tmp_path / "a.bin", tmp_path / "b.bin"], "train_data")
    with pytest.raises(TrainerInputError, match=r"a mix of \.bin token shards and JSONL"):
        is_token_data([tmp_path / "a.bin", tmp_path / "x.jsonl"])
    (tmp_path / "big.jsonl").write_text(json.dumps({"x": [1, 70000], "y": 2}) + "\n")
    assert main([str(tmp_path / "big.jsonl"), str(tmp_path / "big.bin")]) == 2 and not (tmp_path / "big.bin").exists()


def test_two_ranks_train_on_shards_each_reading_its_own_share(tmp_path: Path) -> None:
    """A 2-rank run of the transformer example on train.bin/val.bin: the ranks' samples are disjoint and cover
    the epoch (the sample trace), the replicas agree, and it learns."""
    data, out, trace = tmp_path / "data", tmp_path / "out", tmp_path / "trace"
    write_copy_task(data, 512, 8, 16, val=128, tokens=True)
    (data / "shards").mkdir()
    (data / "train.bin").rename(data / "shards" / "train.bin")  # a folder of *.bin is token data too
    cmd = launch_cmd("--nproc-per-node", "2", "--", PY, "-m", "trainer.train",
                     "--model", "trainer.examples.transformer:build",
                     "--model-args", '{"vocab": 16, "seq": 8, "dim": 32, "layers": 1, "heads": 2}',
                     "--train-data", str(data / "shards"), "--val-data", str(data / "val.bin"), "--batch-size", "16",
                     "--epochs", "6", "--lr", "0.01", "--checkpoint-every", "1000", "--output-dir", str(out))  # fmt: skip
    proc = subprocess.run(cmd, env=clean_env(tmp_path, TRAINER_SAMPLE_TRACE=str(trace)),
                          capture_output=True, text=True, timeout=300)  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-4000:]
    summary = json.loads((out / "summary.json").read_text())
    assert summary["records"] == 512 and summary["params_in_sync"] is True, summary
    assert summary["val_accuracy"] > 0.5, summary  # chance is 1/16
    seen = {}
    for rank in (0, 1):
        lines = [json.loads(line) for line in (trace / f"rank-{rank}.jsonl").read_text().splitlines()]
        seen[rank] = {i for r in lines if r["epoch"] == 0 for i in r["ids"]}
    assert not seen[0] & seen[1] and seen[0] | seen[1] == set(range(512))

"""Token shards: uint16 token ids in a binary file, read by memory map, so a language model's data costs
no JSON parsing and no memory up front (each rank pages in only the samples it reads).

The layout is llm.c's `.bin` (dev/data/data_common.py `write_datafile`: a header of 256 int32, `[0]` the
magic 20240520, `[1]` the version 1, `[2]` the token count, then the tokens as uint16), the successor of
nanoGPT's `train.bin` (data/openwebtext/prepare.py writes raw uint16; train.py reads it with
`np.memmap(..., dtype=np.uint16, mode='r')`). One addition in a slot llm.c leaves 0: `[3]` is the tokens per
sample, `L`. Sample `i` is tokens `[i*L, (i+1)*L)`: `x` its first `L-1` ids, `y` its last, the next token
after `x`, which a classifier on the last position (trainer/examples/transformer.py) learns; a JSONL record
`{"x": ids, "y": id}` is the same sample (`python -m trainer.data.tokens` converts).

Samples are indexed like the map-style JSONL data (`data.ExampleDataset`): `order.py`'s global order shards
them by rank, checkpoints keep the position, so nothing else in the loop knows which format it reads.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Any

import numpy as np
import orjson
import torch
from torch.utils.data import Dataset

from ..errors import TrainerInputError
from .jsonl import Examples

MAGIC, VERSION, HEADER_INTS = 20240520, 1, 256
HEADER_BYTES = HEADER_INTS * 4
SUFFIX = ".bin"
MAX_TOKEN = np.iinfo(np.uint16).max


def is_token_data(files: list[Path]) -> bool:
    """Whether `files` are token shards (all `.bin`); a mix of shards and JSONL is refused."""
    shards = [f.suffix == SUFFIX for f in files]
    if any(shards) and not all(shards):
        raise TrainerInputError(f"data: a mix of {SUFFIX} token shards and JSONL files; use one format")
    return bool(shards) and all(shards)


def write_shard(path: Path, tokens: np.ndarray, sample_tokens: int) -> None:
    """Write `tokens` (whole samples of `sample_tokens` ids) as a shard, through a temporary file and a rename."""
    if sample_tokens < 2 or len(tokens) % sample_tokens:
        raise ValueError(f"{len(tokens)} tokens are not whole samples of {sample_tokens} (at least 2) tokens")
    header = np.zeros(HEADER_INTS, dtype=np.int32)
    header[:4] = (MAGIC, VERSION, len(tokens), sample_tokens)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    with open(tmp, "wb") as f:
        f.write(header.tobytes())
        f.write(np.asarray(tokens, dtype=np.uint16).tobytes())
    os.replace(tmp, path)


def read_header(path: Path, field: str) -> tuple[int, int]:
    """(token count, tokens per sample) of a shard, checked against its size; a bad shard names itself."""
    with open(path, "rb") as f:
        raw = f.read(HEADER_BYTES)
    header = np.frombuffer(raw, dtype=np.int32) if len(raw) == HEADER_BYTES else None
    if header is None or int(header[0]) != MAGIC or int(header[1]) != VERSION:
        raise TrainerInputError(
            f"{field}: {path} is not a token shard (llm.c's .bin header: magic {MAGIC}, version {VERSION}); "
            "write one with python -m trainer.data.tokens"
        )
    count, sample = int(header[2]), int(header[3])
    if sample < 2:
        raise TrainerInputError(f"{field}: {path} does not say its tokens per sample (header[3] = {sample})")
    if path.stat().st_size != HEADER_BYTES + 2 * count:
        raise TrainerInputError(f"{field}: {path} is {path.stat().st_size} bytes, its header says {count} tokens")
    if count < sample:
        raise TrainerInputError(f"{field}: {path} holds {count} tokens, less than one sample of {sample}")
    return count, sample


class TokenDataset(Dataset[tuple[torch.Tensor, torch.Tensor, torch.Tensor]]):
    """The samples of one or more shards, indexed by a whole batch of indices like `data.ExampleDataset`:
    `(x, y, indices)`, `x` int64 `[batch, L-1]`, `y` int64 `[batch]`. The maps open lazily, so a DataLoader
    worker opens its own instead of receiving a copy."""

    def __init__(self, files: list[Path], field: str) -> None:
        self.files = files
        found = [read_header(f, field) for f in files]
        lengths = {sample for _, sample in found}
        if len(lengths) > 1:
            raise TrainerInputError(f"{field}: shards of different sample lengths {sorted(lengths)}; use one")
        self.sample_tokens = lengths.pop()
        self.counts = [count // self.sample_tokens for count, _ in found]
        self.starts = np.cumsum([0, *self.counts])
        self.maps: list[np.ndarray] | None = None

    def __len__(self) -> int:
        return int(self.starts[-1])

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "maps": None}

    def _maps(self) -> list[np.ndarray]:
        if self.maps is None:
            self.maps = [
                np.memmap(f, dtype=np.uint16, mode="r", offset=HEADER_BYTES, shape=(n, self.sample_tokens))
                for f, n in zip(self.files, self.counts, strict=True)
            ]
        return self.maps

    def __getitem__(self, index: int | list[int]) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        ids = np.atleast_1d(np.asarray(index, dtype=np.int64))
        shard = np.searchsorted(self.starts, ids, side="right") - 1
        rows = np.empty((len(ids), self.sample_tokens), dtype=np.int64)
        maps = self._maps()
        for s in np.unique(shard):
            at = shard == s
            rows[at] = maps[s][ids[at] - self.starts[s]]  # reads only these samples' pages
        samples = torch.from_numpy(rows)
        x, y = samples[:, :-1], samples[:, -1]
        i = torch.from_numpy(ids)
        return (x[0], y[0], i[0]) if isinstance(index, int) else (x, y, i)

    def examples(self) -> Examples:
        """Every sample in memory (validation data, which the evaluator splits by index)."""
        x, y, _ = self[list(range(len(self)))]
        places = [f"{f}:sample {k}" for f, n in zip(self.files, self.counts, strict=True) for k in range(n)]
        return Examples(x, y, places)


def from_jsonl(paths: list[Path]) -> tuple[np.ndarray, int]:
    """JSONL records `{"x": ids, "y": id}` as samples `x + [y]`; ids must be integers in 0..65535."""
    rows: list[list[int]] = []
    for path in paths:
        with open(path, "rb") as fh:
            for lineno, raw in enumerate(fh, start=1):
                if raw.strip():
                    record = orjson.loads(raw)
                    row = [*record["x"], record["y"]]
                    if not all(
                        isinstance(t, int | float) and float(t).is_integer() and 0 <= t <= MAX_TOKEN for t in row
                    ):
                        raise TrainerInputError(f"{path}:{lineno}: token ids must be integers in 0..{MAX_TOKEN}")
                    if rows and len(row) != len(rows[0]):
                        raise TrainerInputError(f"{path}:{lineno}: {len(row)} tokens, earlier records {len(rows[0])}")
                    rows.append([int(t) for t in row])
    if not rows:
        raise TrainerInputError(f"{', '.join(map(str, paths))}: no records")
    return np.asarray(rows, dtype=np.uint16).reshape(-1), len(rows[0])


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m trainer.data.tokens",
        description="Convert JSONL records {x: ids, y: id} (or nanoGPT's raw uint16 .bin) to a token shard.",
    )
    p.add_argument("inputs", nargs="+", type=Path, help="JSONL files, or one raw uint16 file with --raw")
    p.add_argument("output", type=Path, help="the shard to write (.bin)")
    p.add_argument("--raw", type=int, metavar="L", help="the input is raw uint16 tokens; L tokens per sample")
    args = p.parse_args(argv)
    try:
        if args.raw:
            tokens = np.fromfile(args.inputs[0], dtype=np.uint16)
            sample = args.raw
            tokens = tokens[
                : len(tokens) // sample * sample
            ]  # a last partial sample is dropped, as nanoGPT's windows do
        else:
            tokens, sample = from_jsonl(args.inputs)
        write_shard(args.output, tokens, sample)
    except (TrainerInputError, ValueError, KeyError) as exc:
        print(f"python -m trainer.data.tokens: {exc}", file=sys.stderr)
        return 2
    print(f"{args.output}: {len(tokens) // sample} samples of {sample} tokens")
    return 0


if __name__ == "__main__":
    sys.exit(main())

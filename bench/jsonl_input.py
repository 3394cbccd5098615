"""Benchmark 2: the streaming JSONL reader against a bare read-and-parse loop, and bytes per rank.

Rate: records/s of `ShardedJsonlReader(...).batches()` (one process reading the whole file,
parsing, checking and stacking into tensors) against `for line in file: orjson.loads(line)`,
the bare minimum with the project's JSON parser. Bytes: what each of N ranks reads, counted by
the kernel (`rchar` in /proc/thread-self/io) and by the reader itself, against file/N.
"""

from __future__ import annotations

import time
from pathlib import Path

import orjson

from .common import WORK, Figure, figure, interleaved
from .datasets import digits

NAME = "jsonl"
BATCH = 32


def _rchar() -> int:
    """Bytes this thread has read through read(2)-like calls, as the kernel counts them."""
    for line in Path("/proc/thread-self/io").read_text().splitlines():
        if line.startswith("rchar:"):
            return int(line.split()[1])
    raise RuntimeError("no rchar in /proc/thread-self/io")


def bare_rate(path: Path) -> float:
    """Records/s of reading the file line by line and parsing each line with orjson."""
    t0 = time.perf_counter()
    n = 0
    with open(path, "rb") as fh:
        for line in fh:
            orjson.loads(line)
            n += 1
    return n / (time.perf_counter() - t0)


def reader_rate(path: Path) -> float:
    """Records/s of the trainer's streaming reader (rank 0 of 1), batches of 32 tensors."""
    from trainer.streaming import ShardedJsonlReader

    t0 = time.perf_counter()
    n = 0
    for x, _y, _ids in ShardedJsonlReader([path], 0, 1).batches(BATCH, "classification"):
        n += len(x)
    return n / (time.perf_counter() - t0)


def rank_bytes(files: list[Path], world: int) -> tuple[float, float, float]:
    """Max over ranks of (kernel-counted bytes, reader-counted bytes) of one pass, over file/N; and the
    trainer's set-up + one epoch (count pass, one sample, batches) in kernel bytes over file/N."""
    from trainer.streaming import ShardedJsonlReader

    share = sum(f.stat().st_size for f in files) / world
    kernel, own, trainer_epoch = [], [], []
    for rank in range(world):
        reader = ShardedJsonlReader(files, rank, world)
        before = _rchar()
        for _ in reader.batches(BATCH, "classification"):
            pass
        kernel.append((_rchar() - before) / share)
        own.append(reader.bytes_read / share)
        reader = ShardedJsonlReader(files, rank, world)
        before = _rchar()
        reader.count()
        next(reader.batches(1, "classification"), None)
        for _ in reader.batches(BATCH, "classification"):
            pass
        trainer_epoch.append((_rchar() - before) / share)
    return max(kernel), max(own), max(trainer_epoch)


def run(quick: bool = False) -> list[Figure]:
    copies, reps = (4, 2) if quick else (40, 5)  # 40 copies: 57,520 records, 22 MB
    path = digits(copies)
    rates = interleaved({"bare": lambda: bare_rate(path), "reader": lambda: reader_rate(path)}, reps)
    ratio = [r / b for r, b in zip(rates["reader"], rates["bare"], strict=True)]
    size_mb = path.stat().st_size / 1e6
    figs = [
        figure(NAME, "streaming reader rate / bare orjson loop", ratio, unit="x", target=">= 0.7",
               note=f"{path.name}: {size_mb:.1f} MB, 64 floats + label per record, batches of {BATCH}"),
        figure(NAME, "streaming reader", [r / 1e3 for r in rates["reader"]], unit="k records/s"),
        figure(NAME, "bare orjson loop", [r / 1e3 for r in rates["bare"]], unit="k records/s"),
    ]  # fmt: skip
    parts = _split(path, 3)  # several files, so the byte ranges cross file boundaries too
    for world in (2, 4):
        kernel, own, epoch = rank_bytes(parts, world)
        figs.append(Figure(NAME, f"bytes read per rank / (file/N), {world} ranks", kernel, kernel, kernel, unit="x",
                           target="<= 1.1", reps=1, note="max over ranks, counted by the kernel (rchar)",
                           detail={"reader_counted": round(own, 4), "trainer_setup_plus_epoch": round(epoch, 4)}))  # fmt: skip
    return figs


def _split(path: Path, n: int) -> list[Path]:
    """The file cut into `n` JSONL files at line boundaries (cached)."""
    lines = path.read_bytes().splitlines(keepends=True)
    out = []
    for i in range(n):
        part = WORK / "data" / f"{path.stem}-part{i}.jsonl"
        if not part.is_file():
            part.write_bytes(b"".join(lines[i * len(lines) // n : (i + 1) * len(lines) // n]))
        out.append(part)
    return out

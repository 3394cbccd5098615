"""Benchmark 2: the streaming JSONL reader against a bare read-and-parse loop, and bytes per rank.

Rate: records/s of `ShardedJsonlReader(...).batches()` (one process reading the whole file,
parsing, checking and stacking into tensors) against `for line in file: orjson.loads(line)`,
the bare minimum with the project's JSON parser. Bytes: what each of N ranks reads, counted by
the kernel (`rchar` in /proc/thread-self/io) and by the reader itself, against file/N.
The trainer's streaming path (`stream_order`: seeded shuffle buffer + read-ahead thread) is
timed on its own, and inside a digits ConvNet step loop (forward, backward, AdamW step per batch
of 32) for its data-wait share: seconds blocked in `next()` / loop seconds, with the read-ahead
thread and with the same batches built inline.
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
    from trainer.data.streaming import ShardedJsonlReader

    t0 = time.perf_counter()
    n = 0
    for x, _y, _ids in ShardedJsonlReader([path], 0, 1).batches(BATCH, "classification"):
        n += len(x)
    return n / (time.perf_counter() - t0)


SHUFFLE = 10_000


def shuffled_rate(path: Path) -> float:
    """Records/s of the trainer's streaming path: shuffle buffer of SHUFFLE + read-ahead thread."""
    from trainer.data.stream_order import batches, read_ahead
    from trainer.data.streaming import ShardedJsonlReader

    t0 = time.perf_counter()
    n = 0
    for x, _y, _ids, _state in read_ahead(batches(ShardedJsonlReader([path], 0, 1), BATCH, "classification",
                                                  SHUFFLE, 0, 0, 0, None)):  # fmt: skip
        n += len(x)
    return n / (time.perf_counter() - t0)


def data_wait_share(path: Path, ahead: bool, limit: int = 150) -> float:
    """Share of a digits training loop's time spent waiting for the next streaming batch."""
    import torch
    from trainer.data.stream_order import batches, read_ahead
    from trainer.data.streaming import ShardedJsonlReader
    from trainer.training.models import DigitsConvNet

    torch.manual_seed(0)
    model = DigitsConvNet()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    source = batches(ShardedJsonlReader([path], 0, 1), BATCH, "classification", SHUFFLE, 0, 0, 0, None)
    stream = read_ahead(source) if ahead else source
    waited, t_start = 0.0, time.perf_counter()
    for _ in range(limit):
        t0 = time.perf_counter()
        batch = next(stream, None)
        waited += time.perf_counter() - t0
        if batch is None:
            break
        loss = torch.nn.functional.cross_entropy(model(batch[0]), batch[1])
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
    total = time.perf_counter() - t_start
    if ahead:
        stream.close()  # type: ignore[attr-defined]
    return waited / total


def rank_bytes(files: list[Path], world: int) -> tuple[float, float, float]:
    """Max over ranks of (kernel-counted bytes, reader-counted bytes) of one pass, over file/N; and the
    trainer's set-up + one epoch (count pass, one sample, batches) in kernel bytes over file/N."""
    from trainer.data.streaming import ShardedJsonlReader

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
    copies, reps = (4, 1) if quick else (40, 5)  # 40 copies: 57,520 records, 22 MB
    path = digits(copies)
    rates = interleaved({"bare": lambda: bare_rate(path), "reader": lambda: reader_rate(path),
                         "shuffled": lambda: shuffled_rate(path)}, reps)  # fmt: skip
    shares = interleaved({"ahead": lambda: data_wait_share(path, True),
                          "inline": lambda: data_wait_share(path, False)}, min(reps, 3), warmup=0)  # fmt: skip
    ratio = [r / b for r, b in zip(rates["reader"], rates["bare"], strict=True)]
    size_mb = path.stat().st_size / 1e6
    figs = [
        figure(NAME, "streaming reader rate / bare orjson loop", ratio, unit="x", target=">= 0.7",
               note=f"{path.name}: {size_mb:.1f} MB, 64 floats + label per record, batches of {BATCH}"),
        figure(NAME, "streaming reader", [r / 1e3 for r in rates["reader"]], unit="k records/s"),
        figure(NAME, "bare orjson loop", [r / 1e3 for r in rates["bare"]], unit="k records/s"),
        figure(NAME, f"streaming, shuffle buffer {SHUFFLE:,} + read-ahead thread", [r / 1e3 for r in rates["shuffled"]],
               unit="k records/s", note="the trainer's streaming path (stream_order), nothing else running"),
        figure(NAME, "streaming data-wait share of a digits step loop, read-ahead", shares["ahead"], unit="x",
               note="seconds blocked in next() / loop seconds; 150 batches of 32, forward+backward+AdamW"),
        figure(NAME, "streaming data-wait share of a digits step loop, inline", shares["inline"], unit="x",
               note="the same batches built in the loop's thread, for comparison"),
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

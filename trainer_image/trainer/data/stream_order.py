"""The streaming reader's record order: a seeded shuffle buffer whose state can be saved and
restored, and read-ahead in a background thread.

The buffer (`shuffle_buffer: N`) is the one tf.data and WebDataset use: fill N lines, then for
each new line emit a random buffered one and put the new one in its place; at the end of the
shard, drain in random order. Its randomness comes from `random.Random` seeded with
(seed, epoch, rank). The state after any emitted batch is plain data: the byte offset of the next
unread line, the offsets of the buffered lines (re-read on restore, a seek each) and the
generator's state. A checkpoint saves the state of the last batch the loop *consumed*, not of
what the thread read ahead, so a resume sees exactly the sequence an uninterrupted run sees.

The thread parses JSON and builds tensors (most of the reader's cost) while the step loop
computes; at most `READ_AHEAD` batches wait in the queue.
"""

from __future__ import annotations

import queue
import random
import threading
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import torch

from .streaming import ShardedJsonlReader, chunks

READ_AHEAD = 4
"""Batches the background thread may have ready ahead of the step loop."""

StreamBatch = tuple[torch.Tensor, torch.Tensor, list[int], dict[str, Any]]


def plain_state(state: dict[str, Any]) -> dict[str, Any]:
    """A batch's reader state as plain lists and numbers (what `torch.load(weights_only=True)`
    reads back); the per-batch state keeps the buffer as an array, a memcpy, until a checkpoint."""
    version, internal, gauss = state["rng"]
    return {**state, "buffer": [int(o) for o in state["buffer"]], "rng": [version, list(internal), gauss]}


def shuffled(
    reader: ShardedJsonlReader, size: int, seed: int, epoch: int, rank: int, state: dict[str, Any] | None
) -> Iterator[tuple[bytes, int, Callable[[], dict[str, Any]]]]:
    """(raw line, global offset, the state after it) in buffer order. The state is a function,
    called only at batch ends (it copies the buffer's offsets), before the generator resumes."""
    rng = random.Random(f"{seed}/{epoch}/{rank}")
    raws: list[bytes] = []  # the buffered lines; their offsets in `offs[:len(raws)]`
    offs = np.zeros(max(size, 1), dtype=np.int64)
    start = 0
    if state is not None:
        start = int(state["next"])
        for i, off in enumerate(state["buffer"]):
            raws.append(reader.line_at(int(off)))
            offs[i] = int(off)
        version, internal, gauss = state["rng"]
        rng.setstate((version, tuple(internal), gauss))
    position = {"next": start}

    def snapshot() -> dict[str, Any]:
        return {"next": position["next"], "buffer": offs[: len(raws)].copy(), "rng": rng.getstate()}

    for raw, offset, next_offset in reader.lines_from(start):
        position["next"] = next_offset
        if len(raws) < size:
            offs[len(raws)] = offset
            raws.append(raw)
            continue
        if size == 0:
            yield raw, offset, snapshot
            continue
        j = rng.randrange(size)
        out, out_offset = raws[j], int(offs[j])
        raws[j], offs[j] = raw, offset
        yield out, out_offset, snapshot
    while raws:
        j, last = rng.randrange(len(raws)), len(raws) - 1
        raws[j], raws[last] = raws[last], raws[j]
        offs[j], offs[last] = offs[last], offs[j]
        out, out_offset = raws.pop(), int(offs[last])
        yield out, out_offset, snapshot


def batches(
    reader: ShardedJsonlReader,
    batch_size: int,
    task: str,
    size: int,
    seed: int,
    epoch: int,
    rank: int,
    state: dict[str, Any] | None,
) -> Iterator[StreamBatch]:
    """Batches of (x, y, ids, state after the batch), in the shuffled order. The state is read as
    soon as a batch is full, before the shuffle generator moves on."""
    for rows in chunks(shuffled(reader, size, seed, epoch, rank, state), batch_size):
        yield (*reader.batch(rows, task), rows[-1][2]())


def read_ahead(source: Iterator[StreamBatch], depth: int = READ_AHEAD) -> Iterator[StreamBatch]:
    """Run `source` in a background thread, `depth` batches ahead; errors re-raised here. Leaving
    the loop early (the epoch's last step, a stop) ends the thread at its next batch."""
    box: queue.Queue[tuple[str, Any]] = queue.Queue(maxsize=depth)
    stop = threading.Event()

    def put(item: tuple[str, Any]) -> bool:
        while not stop.is_set():
            try:
                box.put(item, timeout=0.1)
                return True
            except queue.Full:
                continue
        return False

    def work() -> None:
        try:
            for item in source:
                if not put(("batch", item)):
                    return
            put(("end", None))
        except BaseException as exc:  # re-raised in the step loop
            put(("error", exc))

    thread = threading.Thread(target=work, name="stream-reader", daemon=True)
    thread.start()
    try:
        while True:
            kind, item = box.get()
            if kind == "end":
                return
            if kind == "error":
                raise item
            yield item
    finally:
        stop.set()
        thread.join(timeout=5)

"""Rank-sharded streaming JSONL: each rank reads only ~1/N of the bytes, never the rest.

The files are treated as one byte space split into N equal ranges. A line belongs to the rank
whose range holds the line's first byte, so the ranks' lines are disjoint and cover every line,
and a rank seeks straight to its range instead of parsing 50 million records it will not use.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import torch

from ..errors import TrainerInputError
from ..s3_stream import S3Source
from .jsonl import check_record, parse_line, to_tensors

File = Path | S3Source
"""A local file, or an object streamed from S3 (s3_stream.py): the reader asks each for its size and a
forward reader from a byte offset, so local and S3 data share one sharding, order and checkpoint state."""


def size_of(file: File) -> int:
    return file.stat().st_size if isinstance(file, Path) else file.size


def open_at(file: File, start: int, stop: int) -> Any:
    """A binary reader of `file` positioned at `start`; `stop` is where the caller means to stop (S3 fetches up
    to it, then only a line's tail)."""
    if isinstance(file, S3Source):
        return file.open_at(start, stop)
    fh = open(file, "rb")  # noqa: SIM115 - the caller's `with` closes it
    fh.seek(start)
    return fh


@dataclass(frozen=True)
class Span:
    path: File
    start: int  # first byte this rank may start a line at
    end: int  # lines starting at or after this byte belong to the next rank


def shard_spans(files: Sequence[File], rank: int, world_size: int) -> list[Span]:
    sizes = [size_of(p) for p in files]
    total = sum(sizes)
    lo, hi = total * rank // world_size, total * (rank + 1) // world_size
    spans: list[Span] = []
    offset = 0
    for path, size in zip(files, sizes, strict=True):
        start, end = max(lo - offset, 0), min(hi - offset, size)
        if start < end:
            spans.append(Span(path, start, end))
        offset += size
    return spans


def _line_number(path: File, pos: int) -> int:
    """1-based line number of the line starting at byte `pos` (only computed for error messages)."""
    count = 0
    with open_at(path, 0, pos) as fh:
        remaining = pos
        while remaining > 0:
            chunk = fh.read(min(remaining, 1 << 20))
            if not chunk:
                break
            count += chunk.count(b"\n")
            remaining -= len(chunk)
    return count + 1


Row = tuple[bytes, int, Any]
"""(raw line, global byte offset of the line, anything the caller carries along)."""

T = TypeVar("T")


def chunks(items: Iterable[T], size: int) -> Iterator[list[T]]:
    """Lists of `size` items (the last may be shorter), each handed out as soon as it is full:
    `itertools.batched` (Python 3.12) without its tuples, for the image's 3.10 and 3.11 too."""
    chunk: list[T] = []
    for item in items:
        chunk.append(item)
        if len(chunk) == size:
            yield chunk
            chunk = []
    if chunk:
        yield chunk


class ShardedJsonlReader:
    """This rank's lines of the files, in file order. `bytes_read` counts what was read."""

    def __init__(self, files: Sequence[File], rank: int, world_size: int) -> None:
        self.files = list(files)
        self.spans = shard_spans(files, rank, world_size)
        self.bytes_read = 0
        self.base = {p: sum(size_of(f) for f in files[:i]) for i, p in enumerate(files)}
        self.first: tuple[bytes, int, int] | None = None  # this rank's first line, found by count()

    def lines_from(self, start: int = 0) -> Iterator[tuple[bytes, int, int]]:
        """(raw line, global offset, global offset of the line after it) for this rank's non-blank
        lines at or after global byte `start` (0, or a line start from a saved reader state)."""
        for span in self.spans:
            base = self.base[span.path]
            if base + span.end <= start:
                continue
            begin = start - base if start > base + span.start else max(span.start - 1, 0)
            with open_at(span.path, begin, span.end) as fh:
                if start <= base + span.start and span.start > 0:
                    self.bytes_read += 1
                    if fh.read(1) != b"\n":
                        self.bytes_read += len(fh.readline())  # tail of a line owned by the previous rank
                pos = fh.tell()  # then counted, not asked for: tell() per line was a tenth of the reader's time
                while pos < span.end:
                    raw = fh.readline()
                    if not raw:
                        break
                    self.bytes_read += len(raw)
                    if raw.strip():
                        yield raw, base + pos, base + pos + len(raw)
                    pos += len(raw)

    def count(self) -> int:
        """This rank's lines (one pass over its share), keeping the first for a sample batch."""
        n = 0
        for line in self.lines_from():
            self.first = self.first or line
            n += 1
        return n

    def locate(self, offset: int) -> tuple[File, int]:
        """(file, byte offset in it) of a global offset."""
        path = max((p for p in self.files if self.base[p] <= offset), key=lambda p: self.base[p])
        return path, offset - self.base[path]

    def line_at(self, offset: int) -> bytes:
        path, pos = self.locate(offset)
        with open_at(path, pos, pos) as fh:
            return bytes(fh.readline())

    def where(self, offset: int) -> str:
        """`file:line` of a global offset (counts the file's lines: for error messages only)."""
        path, pos = self.locate(offset)
        if isinstance(path, S3Source):  # counting lines would read the object up to there
            return f"{path.name} at byte {pos}"
        return f"{path}:{_line_number(path, pos)}"

    def batch(self, rows: list[Row], task: str) -> tuple[torch.Tensor, torch.Tensor, list[int]]:
        """(x, y, ids) of raw lines, the ids their global offsets; errors name the file and line."""
        xs: list[Any] = []
        ys: list[Any] = []
        for raw, offset, _ in rows:
            try:
                x, y = check_record(parse_line(raw, "?"), task, "?")
            except TrainerInputError as exc:
                raise TrainerInputError(str(exc).replace("?", self.where(offset), 1)) from None
            xs.append(x)
            ys.append(y)
        ids = [offset for _, offset, _ in rows]
        try:
            return (*to_tensors(xs, ys, task, ["?"] * len(xs)), ids)
        except TrainerInputError:
            return (*to_tensors(xs, ys, task, [self.where(o) for o in ids]), ids)

    def batches(
        self, batch_size: int, task: str, skip: int = 0
    ) -> Iterator[tuple[torch.Tensor, torch.Tensor, list[int]]]:
        """Batches of (x, y, ids) in file order, after skipping `skip` records."""
        for rows in chunks(itertools.islice(self.lines_from(), skip, None), batch_size):
            yield self.batch(rows, task)

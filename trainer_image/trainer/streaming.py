"""Rank-sharded streaming JSONL: each rank reads only ~1/N of the bytes, never the rest.

The files are treated as one byte space split into N equal ranges. A line belongs to the rank
whose range holds the line's first byte, so the ranks' lines are disjoint and cover every line,
and a rank seeks straight to its range instead of parsing 50 million records it will not use.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from .data import check_record, parse_line, to_tensors
from .errors import TrainerInputError


@dataclass(frozen=True)
class Span:
    path: Path
    start: int  # first byte this rank may start a line at
    end: int  # lines starting at or after this byte belong to the next rank


def shard_spans(files: list[Path], rank: int, world_size: int) -> list[Span]:
    sizes = [p.stat().st_size for p in files]
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


def _line_number(path: Path, pos: int) -> int:
    """1-based line number of the line starting at byte `pos` (only computed for error messages)."""
    count = 0
    with open(path, "rb") as fh:
        remaining = pos
        while remaining > 0:
            chunk = fh.read(min(remaining, 1 << 20))
            if not chunk:
                break
            count += chunk.count(b"\n")
            remaining -= len(chunk)
    return count + 1


class ShardedJsonlReader:
    """This rank's lines of the files, in file order. `bytes_read` counts what was read."""

    def __init__(self, files: list[Path], rank: int, world_size: int) -> None:
        self.files = files
        self.spans = shard_spans(files, rank, world_size)
        self.bytes_read = 0
        self.base = {p: sum(f.stat().st_size for f in files[:i]) for i, p in enumerate(files)}

    def lines_from(self, start: int) -> Iterator[tuple[bytes, int, int]]:
        """(raw line, global offset, global offset of the line after it) for this rank's non-blank
        lines at or after global byte `start` (a line start, from a saved reader state)."""
        for span in self.spans:
            base = self.base[span.path]
            if base + span.end <= start:
                continue
            with open(span.path, "rb") as fh:
                if start > base + span.start:
                    fh.seek(start - base)
                elif span.start > 0:
                    fh.seek(span.start - 1)
                    if fh.read(1) != b"\n":
                        fh.readline()  # tail of a line owned by the previous rank
                pos = fh.tell()
                while pos < span.end:
                    raw = fh.readline()
                    if not raw:
                        break
                    self.bytes_read += len(raw)
                    if raw.strip():
                        yield raw, base + pos, base + pos + len(raw)
                    pos += len(raw)

    def locate(self, offset: int) -> tuple[Path, int]:
        """(file, byte offset in it) of a global offset."""
        path = max((p for p in self.files if self.base[p] <= offset), key=lambda p: self.base[p])
        return path, offset - self.base[path]

    def line_at(self, offset: int) -> bytes:
        path, pos = self.locate(offset)
        with open(path, "rb") as fh:
            fh.seek(pos)
            return fh.readline()

    def parse(self, rows: list[tuple[bytes, int]], task: str) -> tuple[torch.Tensor, torch.Tensor]:
        """(x, y) tensors of raw lines; errors name the file and line."""
        xs: list[Any] = []
        ys: list[Any] = []
        for raw, offset in rows:
            try:
                x, y = check_record(parse_line(raw, "?"), task, "?")
            except TrainerInputError as exc:
                raise TrainerInputError(str(exc).replace("?", self.where(*self.locate(offset)), 1)) from None
            xs.append(x)
            ys.append(y)
        try:
            return to_tensors(xs, ys, task, ["?"] * len(xs))
        except TrainerInputError:
            return to_tensors(xs, ys, task, [self.where(*self.locate(o)) for _, o in rows])

    def lines(self) -> Iterator[tuple[bytes, Path, int]]:
        """(raw line, file, byte offset of the line) for every non-blank line this rank owns."""
        for span in self.spans:
            with open(span.path, "rb") as fh:
                if span.start > 0:
                    fh.seek(span.start - 1)
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
                        yield raw, span.path, pos
                    pos += len(raw)

    def count(self) -> int:
        return sum(1 for _ in self.lines())

    def where(self, path: Path, pos: int) -> str:
        return f"{path}:{_line_number(path, pos)}"

    def batches(
        self, batch_size: int, task: str, skip: int = 0
    ) -> Iterator[tuple[torch.Tensor, torch.Tensor, list[int]]]:
        """Batches of (x, y, ids) after skipping `skip` records; ids are global byte offsets."""
        base = {p: sum(f.stat().st_size for f in self.files[:i]) for i, p in enumerate(self.files)}
        xs: list[Any] = []
        ys: list[Any] = []
        ids: list[int] = []
        positions: list[tuple[Path, int]] = []
        for n, (raw, path, pos) in enumerate(self.lines()):
            if n < skip:
                continue
            try:
                x, y = check_record(parse_line(raw, "?"), task, "?")
            except TrainerInputError as exc:
                raise TrainerInputError(str(exc).replace("?", self.where(path, pos), 1)) from None
            xs.append(x)
            ys.append(y)
            ids.append(base[path] + pos)
            positions.append((path, pos))
            if len(xs) == batch_size:
                yield (*self._stack(xs, ys, task, positions), ids)
                xs, ys, ids, positions = [], [], [], []
        if xs:
            yield (*self._stack(xs, ys, task, positions), ids)

    def _stack(
        self, xs: list[Any], ys: list[Any], task: str, positions: list[tuple[Path, int]]
    ) -> tuple[torch.Tensor, torch.Tensor]:
        try:
            return to_tensors(xs, ys, task, ["?"] * len(xs))
        except TrainerInputError:
            wheres = [self.where(p, o) for p, o in positions]
            return to_tensors(xs, ys, task, wheres)

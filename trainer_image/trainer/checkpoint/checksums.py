"""CRC-32s of a checkpoint file's 64 MiB regions: computed beside the write, checked at resume.

torch.save's own zip CRCs are computed in the writing thread, one record after the other, and checking
them means reading the archive back through `zipfile` in one thread: on the H200 machine the save with
that read-back wrote 0.36x of what the disk writes (docs/benchmarks.md, GPU). Here `RegionCrcWriter` is
the file torch.save writes to: each large `write()` hands its 64 MiB regions to threads, which compute
their CRC-32s (`zlib.crc32` releases the GIL) while the calling thread writes the same bytes, so the
checksum costs about nothing beside the disk. meta.json records the list (`checksums`), and resume reads
the file's regions back in parallel and compares them (`verify_regions`): a flipped bit anywhere in the
file, not only inside a tensor, is caught. Files saved before this carry zip CRCs and are checked as then.
"""

from __future__ import annotations

import os
import zipfile
import zlib
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any

import torch

from ..errors import CheckpointCorrupt

REGION = 64 << 20
INLINE = 1 << 20
"""Writes smaller than this (torch.save's headers and pickles) are summed inline: a thread would cost more."""
THREADS = max(1, min(8, os.cpu_count() or 1))


class RegionCrcWriter:
    """A binary file that keeps the CRC-32 of each `region`-byte slice of what is written to it.

    Within one write, every region's piece is independent: the first continues the CRC of the region the
    previous write left open, the others start a new one. So all pieces are summed at once, beside the write;
    the call returns only when they are done, since torch may reuse the buffer it passed."""

    def __init__(self, raw: IO[bytes], pool: ThreadPoolExecutor, region: int = REGION) -> None:
        self.raw, self.pool, self.region = raw, pool, region
        self.crcs: list[int] = []
        self.fill = region  # bytes in the last region; a full one makes the next byte start a new region

    def write(self, data: bytes | bytearray | memoryview) -> int:
        view = memoryview(data).cast("B")
        pieces: list[tuple[int, int, memoryview]] = []  # (region, CRC so far, bytes)
        at = 0
        while at < len(view):
            if self.fill == self.region:
                self.crcs.append(0)
                self.fill = 0
            take = min(self.region - self.fill, len(view) - at)
            pieces.append((len(self.crcs) - 1, self.crcs[-1], view[at : at + take]))
            self.fill += take
            at += take
        if len(view) < INLINE:
            written = self.raw.write(view)
            for region, start, piece in pieces:
                self.crcs[region] = zlib.crc32(piece, start)
            return written
        jobs: list[tuple[int, Future[int]]] = [(r, self.pool.submit(zlib.crc32, p, s)) for r, s, p in pieces]
        written = self.raw.write(view)
        for region, job in jobs:
            self.crcs[region] = job.result()
        return written

    def flush(self) -> None:
        self.raw.flush()

    def record(self) -> dict[str, Any]:
        """meta.json's entry for this file."""
        return {"region_bytes": self.region, "crc32": list(self.crcs)}


def verify_regions(file: Path, record: dict[str, Any], threads: int = THREADS) -> None:
    """Check `file` against the region CRCs meta.json recorded, reading its regions in parallel."""
    region, expected = int(record["region_bytes"]), [int(c) for c in record["crc32"]]
    size = file.stat().st_size
    if -(-size // region) != len(expected):
        raise CheckpointCorrupt(f"{file}: {size} bytes, but {len(expected)} region checksums were recorded")
    fd = os.open(file, os.O_RDONLY)
    try:

        def crc_of(index: int) -> int:
            return zlib.crc32(os.pread(fd, region, index * region))

        with ThreadPoolExecutor(threads, thread_name_prefix="checkpoint-verify") as pool:
            got = list(pool.map(crc_of, range(len(expected))))
    except OSError as exc:
        raise CheckpointCorrupt(f"{file}: unreadable: {exc}") from None
    finally:
        os.close(fd)
    for index, (want, have) in enumerate(zip(expected, got, strict=True)):
        if want != have:
            start = index * region
            raise CheckpointCorrupt(
                f"{file}: CRC-32 mismatch in bytes {start}-{min(start + region, size) - 1} (corrupted data)"
            )


def verify_zip(file: Path) -> None:
    """Check every member of a torch.save zip against its CRC-32 (reads the file once).

    torch.load trusts the bytes, so a flipped bit in a tensor would otherwise be resumed from.
    """
    try:
        with zipfile.ZipFile(file) as archive:
            bad = archive.testzip()
    except (zipfile.BadZipFile, OSError, EOFError, ValueError) as exc:
        raise CheckpointCorrupt(f"{file}: not a readable torch.save archive: {exc}") from None
    except zipfile.LargeZipFile as exc:  # pragma: no cover - zipfile allows zip64 by default
        raise CheckpointCorrupt(f"{file}: {exc}") from None
    if bad is not None:
        raise CheckpointCorrupt(f"{file}: CRC-32 mismatch in member {bad} (corrupted data)")


@contextmanager
def without_zip_crcs() -> Iterator[None]:
    """torch.save without its own zip CRCs (the region CRCs replace them), the setting restored after."""
    before = torch.serialization.get_crc32_options()
    torch.serialization.set_crc32_options(False)
    try:
        yield
    finally:
        torch.serialization.set_crc32_options(before)

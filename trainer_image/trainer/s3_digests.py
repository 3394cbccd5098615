"""The digests a staged object is checked with: S3's own checksum (its full-object CRC32 or SHA256, else a
single-part upload's MD5 ETag) before the entry is published, and the cache's record, a CRC32 per part of the file
(`PART` bytes each, as S3's composite checksums are per part), checked at every use.

The record is a CRC32, not a sha256: it guards against accidental damage (a disk error, a torn copy, a hand edit),
as S3's own CRC32 does, not against an adversary who can write the cache; and one CRC32 per part serves both the
record and S3's full-object CRC32 (combined), where a sha256 beside it doubled the CPU a download spends digesting
(on a 2-core machine that shares its cores with the store, 0.86x of boto3's own `download_file`; bench/s3_data.py).

Per part because s3transfer fetches the parts concurrently and writes each as its bytes arrive, in order within
the part but the parts interleaved (DownloadSeekableOutputManager: one IOWriteTask per chunk, `seek(offset)` then
`write(data)`, from its one IO thread; s3transfer/download.py). Digests per part run while the parts arrive, where
an in-order digest waits for the slowest part and runs after the last byte (DownloadNonSeekableOutputManager's
DeferQueue holds the rest back). A CRC32 of the whole object is the parts' CRC32s combined (`crc32_combine`); only
S3's full-object SHA256, or a single-part upload's MD5, needs the bytes in order.
"""

from __future__ import annotations

import base64
import hashlib
import os
import queue
import threading
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

PART = 8 * 1024 * 1024
"""The part size of the transfer and of the manifest's digests: boto3's default multipart_chunksize."""
_POLY = 0xEDB88320
"""CRC-32's polynomial, reflected (zlib's)."""


def _multmodp(a: int, b: int) -> int:
    """a(x) * b(x) modulo p(x), in CRC-32's reflected bit order (zlib crc32.c, multmodp)."""
    m, p = 1 << 31, 0
    while True:
        if a & m:
            p ^= b
            if a & (m - 1) == 0:
                return p
        m >>= 1
        b = (b >> 1) ^ _POLY if b & 1 else b >> 1


def _x2n_table() -> list[int]:
    table, p = [], 1 << 30  # x^1
    for _ in range(32):
        table.append(p)
        p = _multmodp(p, p)
    return table


_X2N = _x2n_table()
"""x^(2^n) modulo p(x), n = 0..31 (zlib crc32.c, x2n_table)."""


def _x2nmodp(n: int, k: int) -> int:
    """x^(n * 2^k) modulo p(x) (zlib crc32.c, x2nmodp)."""
    p = 1 << 31  # x^0 == 1
    while n:
        if n & 1:
            p = _multmodp(_X2N[k & 31], p)
        n >>= 1
        k += 1
    return p


def crc32_combine(crc1: int, crc2: int, len2: int) -> int:
    """The CRC-32 of A+B from crc32(A), crc32(B) and len(B): zlib's crc32_combine (crc32.c, 1.2.12 and later;
    Python's zlib module does not expose it). Shifting crc1 by len2 zero bytes is a multiplication by x^(8*len2)."""
    return _multmodp(_x2nmodp(len2, 3), crc1) ^ (crc2 & 0xFFFFFFFF)


class Digests:
    """Running digests of bytes seen in order: sha256 (hex, the cache's own record), md5 (hex, a single-part
    upload's ETag), and S3's base64 SHA256 and CRC32; only the `wanted` ones are computed."""

    def __init__(self, wanted: set[str] | frozenset[str]) -> None:
        self.wanted = wanted
        self.sha = hashlib.sha256() if wanted & {"sha256", "SHA256"} else None
        self.md5 = hashlib.md5(usedforsecurity=False) if "md5" in wanted else None
        self.crc = 0

    def update(self, chunk: bytes) -> None:
        if self.sha is not None:
            self.sha.update(chunk)
        if self.md5 is not None:
            self.md5.update(chunk)
        if "CRC32" in self.wanted:
            self.crc = zlib.crc32(chunk, self.crc)

    def result(self) -> dict[str, str]:
        found = {"CRC32": base64.b64encode(self.crc.to_bytes(4, "big")).decode()} if "CRC32" in self.wanted else {}
        if self.sha is not None:
            found.update(sha256=self.sha.hexdigest(), SHA256=base64.b64encode(self.sha.digest()).decode())
        if self.md5 is not None:
            found["md5"] = self.md5.hexdigest()
        return found


def file_digests(
    path: Path, wanted: set[str] | frozenset[str] = frozenset({"sha256", "md5", "SHA256", "CRC32"})
) -> dict[str, str]:
    """In one pass over the file, those `wanted` of the digests `Digests` keeps."""
    digests = Digests(wanted)
    with path.open("rb") as f:
        while chunk := f.read(1 << 20):
            digests.update(chunk)
    return digests.result()


def crc_hex(value: int) -> str:
    """A CRC32 as the manifest records it: 8 hex digits."""
    return f"{value & 0xFFFFFFFF:08x}"


def _part_chunks(path: Path, index: int, part_size: int) -> Iterator[bytes]:
    with path.open("rb") as f:
        f.seek(index * part_size)
        left = part_size
        while left and (chunk := f.read(min(left, 1 << 20))):
            yield chunk
            left -= len(chunk)


def part_crc(path: Path, index: int, part_size: int) -> int:
    """The CRC32 of one part of the file."""
    value = 0
    for chunk in _part_chunks(path, index, part_size):
        value = zlib.crc32(chunk, value)
    return value


def part_sha256(path: Path, index: int, part_size: int) -> str:
    """The sha256 (hex) of one part of the file: the record of entries staged before the CRC32 one."""
    sha = hashlib.sha256()
    for chunk in _part_chunks(path, index, part_size):
        sha.update(chunk)
    return sha.hexdigest()


def parts_of(size: int, part_size: int = PART) -> int:
    """How many parts a file of `size` bytes has (an empty file: one, empty)."""
    return max(1, -(-size // part_size))


@dataclass
class Fetched:
    """What a download's digests found: S3's checks (`mismatch`'s keys) and the CRC32 of each part (`crc_hex`)."""

    checks: dict[str, str]
    parts: list[str]
    part_size: int = PART


@dataclass
class _Part:
    start: int
    end: int
    crc: int = 0
    next: int = 0
    clean: bool = True


class PartWriter:
    """The file s3transfer writes into (seekable, so it writes each chunk as it arrives: `seek(offset)`, then
    `write(data)`), digesting each part's chunks in worker threads as they come (hashlib and zlib release the GIL).

    A part's chunks come in order within the part; a GET that s3transfer retries starts again at the part's first
    byte (GetObjectTask._main), and its earlier chunks reach the writer first (one IO thread, in order), so a chunk
    at the part's start begins its digest again. A part seen any other way (a gap, an overlap) is digested from
    the file after the download instead, as is the in-order digest (S3's full-object SHA256, or a single-part
    upload's MD5) when a part was written again after it was digested: never a digest of bytes
    other than those in the file."""

    _DEPTH = 8
    """Chunks waiting per worker: what a lagging digest may hold in memory, `io_chunksize` each."""

    def __init__(self, fh: Any, path: Path, size: int, wanted: set[str], workers: int = 2) -> None:
        self.fh, self.path, self.size, self.wanted = fh, path, size, wanted
        n = parts_of(size)
        self._parts = [_Part(i * PART, min(size, (i + 1) * PART), next=i * PART) for i in range(n)]
        self._crc = "CRC32" in wanted
        whole = {w for w in wanted if w in ("md5", "SHA256")}
        self._whole = Digests(whole) if whole else None
        self._whole_ok = True
        self._pending: dict[int, bytes] = {}
        self._next = 0
        self._error: BaseException | None = None
        self._pos = 0
        self._queues: list[queue.Queue[tuple[int, bytes] | None]] = []
        self._threads: list[threading.Thread] = []
        for work in [self._digest_parts] * min(workers, n) + ([self._digest_whole] if self._whole else []):
            q: queue.Queue[tuple[int, bytes] | None] = queue.Queue(self._DEPTH)
            thread = threading.Thread(target=work, args=(q,), name="s3-digests", daemon=True)
            self._queues.append(q)
            self._threads.append(thread)
            thread.start()
        self._part_queues = self._queues[: min(workers, n)]

    def seekable(self) -> bool:
        return True

    def seek(self, offset: int, whence: int = os.SEEK_SET) -> int:
        self._pos = int(self.fh.seek(offset, whence))
        return self._pos

    def tell(self) -> int:
        return self._pos

    def write(self, data: bytes) -> int:
        chunk, offset = bytes(data), self._pos  # a copy only if s3transfer ever hands a mutable buffer
        written = int(self.fh.write(chunk))
        self._pos += written
        index = min(offset // PART, len(self._parts) - 1)
        self._part_queues[index % len(self._part_queues)].put((offset, chunk))
        if self._whole is not None:
            self._queues[-1].put((offset, chunk))
        return written

    def _guarded(self, q: queue.Queue[tuple[int, bytes] | None], take: Any) -> None:
        while (item := q.get()) is not None:
            if self._error is None:
                try:
                    take(*item)
                except BaseException as exc:  # handed to the caller by close()
                    self._error = exc

    def _digest_parts(self, q: queue.Queue[tuple[int, bytes] | None]) -> None:
        self._guarded(q, self._take_part)

    def _take_part(self, offset: int, chunk: bytes) -> None:
        part = self._parts[min(offset // PART, len(self._parts) - 1)]
        if offset == part.start:  # the part's first chunk, or a retried GET's
            part.crc, part.next, part.clean = 0, part.start, True
        if not part.clean or offset != part.next or offset + len(chunk) > part.end:
            part.clean = False
            return
        part.crc = zlib.crc32(chunk, part.crc)
        part.next += len(chunk)

    def _digest_whole(self, q: queue.Queue[tuple[int, bytes] | None]) -> None:
        self._guarded(q, self._take_whole)

    def _take_whole(self, offset: int, chunk: bytes) -> None:
        if offset < self._next:  # bytes already digested were written again
            self._whole_ok = False
        if not self._whole_ok or self._whole is None:
            return
        self._pending[offset] = chunk
        while (ready := self._pending.pop(self._next, None)) is not None:
            self._whole.update(ready)
            self._next += len(ready)

    def close(self) -> None:
        """Waits for the digests of everything written; raises what a digest thread raised."""
        for q in self._queues:
            q.put(None)
        for thread in self._threads:
            thread.join()
        if self._error is not None:
            raise self._error

    def result(self) -> Fetched:
        """The digests of the file as written: a part not seen whole and in order is digested from the file."""
        self.fh.flush()
        for i, part in enumerate(self._parts):
            if not (part.clean and part.next == part.end):
                part.crc = part_crc(self.path, i, PART)
        checks: dict[str, str] = {}
        if self._crc:
            crc = 0
            for part in self._parts:
                crc = crc32_combine(crc, part.crc, part.end - part.start)
            checks["CRC32"] = base64.b64encode(crc.to_bytes(4, "big")).decode()
        if self._whole is not None:
            whole = self._whole.wanted
            ok = self._whole_ok and not self._pending and self._next == self.size
            checks.update(self._whole.result() if ok else file_digests(self.path, whole))
        return Fetched(checks, [crc_hex(part.crc) for part in self._parts])

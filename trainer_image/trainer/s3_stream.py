"""Streaming an `s3://` input straight from the object store (`data: {train: {uri: s3://..., mode: stream}}`,
issue 35 §2): for data bigger than a node's disk, nothing is copied.

The rank-sharded reader (streaming.py) treats the objects as one byte space and gives each rank ~1/N of it; here
each rank's span of an object is read with ranged GETs (`Range: bytes=a-b`, pinned to the listed ETag with
`If-Match`, so a changed object fails instead of mixing versions) of at most `CHUNK` bytes. The next chunk of the
span is fetched in a thread while the program parses the current one, so at most two chunks are in memory: the
bounded local buffer. Past the span's end only the tail of the last line is fetched, in small growing pieces and
never ahead, so a rank reads its share plus about one line. A dropped connection or a 5xx is tried again from
the byte it stopped at, with the data cache's backoff; after the last try the error names the URI. An object
deleted or replaced after the run listed it (a 404 or 412 to the pinned GET) is not tried again. Both fail the
attempt (`TransferFailed`, exit 1), not the spec: the input was there and readable when the launcher checked it.

boto3 finds the endpoint and the credentials as for the cache (s3_objects.py); the launcher names the endpoint to
the program in `TRAINER_S3_ENDPOINT` (`announce`).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, MutableMapping
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from . import s3_objects
from .errors import TrainerInputError
from .s3_objects import ATTEMPTS, BACKOFF_S, S3Object, TransferFailed, TransientError

CHUNK = 4 << 20
"""The most bytes one ranged GET asks for, and so what one reader holds in memory."""
TAIL = 8 << 10
"""The first piece fetched past a span's end for the rest of its last line (doubled until a newline)."""
STREAM_ENV = "TRAINER_STREAM_DATA"
"""The inputs (names, comma-separated) the launcher leaves as URIs for the ranks to stream."""
ENDPOINT_ENV = "TRAINER_S3_ENDPOINT"
AGAIN = "this attempt fails; a new one lists the input again (and stops with exit 2 if it is gone)"


@dataclass(eq=False)
class S3Source:
    """One object of a streamed input, as the listing described it. `fetched` counts GET body bytes."""

    s3: Any
    bucket: str
    obj: S3Object
    fetched: list[int] = field(default_factory=lambda: [0])

    @property
    def size(self) -> int:
        return self.obj.size

    @property
    def name(self) -> str:
        return f"s3://{self.bucket}/{self.obj.key}"

    def get(self, start: int, stop: int) -> bytes:
        """Bytes [start, stop) of the object, tried again on a transient error."""

        def once() -> bytes:
            extra = {"VersionId": self.obj.version_id} if self.obj.version_id else {"IfMatch": f'"{self.obj.etag}"'}
            try:
                body = self.s3.get_object(
                    Bucket=self.bucket, Key=self.obj.key, Range=f"bytes={start}-{stop - 1}", **extra
                )["Body"]
                data = body.read()
            except (*s3_objects.retried_errors(), *_stream_errors()) as exc:
                if gone := _gone(exc):  # the input was there when the run listed it: a failed attempt
                    raise TransferFailed(f"streaming {self.name}: {gone} since this run listed it; {AGAIN}") from None
                # a 403 here is bad input (exit 2), not a failed attempt: the launcher's check only lists a prefix
                # (no s3:GetObject needed) and no listing needs kms:Decrypt, so every retry would meet it again
                raise s3_objects.explain(self.name, exc) from None
            if len(data) != stop - start:
                raise TransientError(f"{self.name}: {len(data)} of {stop - start} bytes at {start}")
            self.fetched[0] += len(data)
            return data

        def failed(message: str) -> Exception:
            return TransferFailed(f"streaming {message}")

        return s3_objects.retried(
            once, lambda m: print(f"[trainer] {m}", flush=True), attempts=ATTEMPTS, backoff_s=BACKOFF_S, failed=failed
        )

    def open_at(self, start: int, stop: int) -> RangedReader:
        return RangedReader(self, start, stop)


class RangedReader:
    """A forward-only binary reader of one object from `start`: `read(n)` and `readline()` as a file's, fetching
    chunks up to `stop` (the span's end), each with the next one read ahead, and past it only the tail of a line:
    at most two chunks held."""

    def __init__(self, source: S3Source, start: int, stop: int) -> None:
        self.source, self.pos, self.stop = source, start, min(stop, source.size)
        self.buf, self.at = b"", 0
        self.tail = TAIL
        self._ahead: tuple[int, int, Future[bytes]] | None = None
        self._pool: ThreadPoolExecutor | None = None

    def _get(self, start: int, end: int) -> bytes:
        """Bytes [start, end): the chunk read ahead when it is that one; then the span's next chunk is read ahead."""
        ahead, self._ahead = self._ahead, None
        if ahead is not None and ahead[:2] == (start, end):
            data = ahead[2].result()  # raises what the GET raised, as a direct call would
        else:
            self._drop(ahead)
            data = self.source.get(start, end)
        if end < self.stop:
            self._pool = self._pool or ThreadPoolExecutor(1, thread_name_prefix="s3-read-ahead")
            following = min(self.stop, end + CHUNK)
            self._ahead = (end, following, self._pool.submit(self.source.get, end, following))
        return data

    @staticmethod
    def _drop(ahead: tuple[int, int, Future[bytes]] | None) -> None:
        if ahead is not None:
            ahead[2].cancel()  # one already running ends on its own; its bytes and any error are dropped

    def _fill(self) -> bool:
        """Fetch the next piece after the buffer; False at the object's end."""
        fetched_to = self.pos + len(self.buf) - self.at
        if fetched_to >= self.source.size:
            return False
        if fetched_to < self.stop:
            end = min(self.stop, fetched_to + CHUNK)
        else:
            end, self.tail = min(self.source.size, fetched_to + self.tail), min(self.tail * 2, CHUNK)
        self.buf = self.buf[self.at :] + self._get(fetched_to, end)
        self.at = 0
        return True

    def read(self, n: int) -> bytes:
        while len(self.buf) - self.at < n and self._fill():
            pass
        out = self.buf[self.at : self.at + n]
        self.at += len(out)
        self.pos += len(out)
        return out

    def readline(self) -> bytes:
        while True:
            newline = self.buf.find(b"\n", self.at)
            if newline >= 0 or not self._fill():
                end = newline + 1 if newline >= 0 else len(self.buf)
                out = self.buf[self.at : end]
                self.at = end
                self.pos += len(out)
                return out

    def tell(self) -> int:
        return self.pos

    def __enter__(self) -> RangedReader:
        return self

    def __exit__(self, *_: object) -> None:
        self.buf = b""
        self._drop(self._ahead)
        self._ahead = None
        if self._pool is not None:
            self._pool.shutdown(wait=False)


def _gone(exc: BaseException) -> str | None:
    """What became of a listed object whose GET the store refused with 404 or 412, or None for any other error.

    Every GET is pinned to the listed version (`If-Match` with its ETag, or its `VersionId`), so a 412
    `PreconditionFailed` means the object was replaced (botocore's S3 model, GetObjectRequest.IfMatch: "otherwise,
    return a 412 Precondition Failed error"), and a 404 (`NoSuchKey`, or `NoSuchVersion` for a pinned version) that
    it was deleted: the store answers 404 for a missing object to a caller with s3:ListBucket (S3 API reference,
    GetObject, Permissions), which the listing had. Not the user's spec to change (exit 2) and not worth another
    try in this attempt: the attempt fails (exit 1), and the next one lists the input again."""
    from botocore.exceptions import ClientError

    if not isinstance(exc, ClientError):
        return None
    code = str(exc.response.get("Error", {}).get("Code", ""))
    status = int(exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode") or 0)
    if code == "PreconditionFailed" or status == 412:
        return "the object was replaced (PreconditionFailed: its ETag is no longer the one listed)"
    if code == "NoSuchBucket":
        return "the bucket was deleted (NoSuchBucket)"
    if code in ("NoSuchKey", "NoSuchVersion") or status == 404:
        return f"the object was deleted ({code or status})"
    return None


def _stream_errors() -> tuple[type[BaseException], ...]:
    """What a body read cut mid-transfer raises besides botocore's own (urllib3's, under botocore's reader)."""
    from urllib3.exceptions import HTTPError

    return (HTTPError,)


def sources(uri: str, field_name: str, rank: int) -> list[S3Source]:
    """The objects of a streamed input (one object, or every `*.jsonl` under a prefix), in key order, sharing one
    client; a missing bucket or object, or refused credentials, is the user's to fix (exit 2) naming the URI.
    Each request's User-Agent names the rank (`trainctl-rank/<r>`): the store's access log shows who read what."""
    s3 = s3_objects.client(user_agent_extra=f"trainctl-rank/{rank}")
    parsed = s3_objects.parse(uri)
    objs = s3_objects.objects(s3, parsed)
    if len(objs) > 1 or objs[0].key != parsed.key:
        objs = [o for o in objs if o.key.endswith(".jsonl")]
        if not objs:
            raise TrainerInputError(f"{field_name}: {uri} has no *.jsonl objects to stream")
    empty = [o.key for o in objs if o.size == 0]
    if empty:
        raise TrainerInputError(f"{field_name}: s3://{parsed.bucket}/{empty[0]} is empty (no JSONL records)")
    return [S3Source(s3, parsed.bucket, o) for o in objs]


def announce(environ: MutableMapping[str, str], say: Callable[[str], None]) -> None:
    """In the launcher, before the workers start: check each streamed input is there (exit 2 naming the URI
    otherwise), and name the endpoint boto3 resolved to the program (`TRAINER_S3_ENDPOINT`)."""
    names = [n for n in environ.get(STREAM_ENV, "").split(",") if n]
    s3 = None
    for name in names:
        uri = environ.get(f"TRAINER_DATA_{name.upper().replace('-', '_')}", "")
        if not uri.startswith("s3://"):
            continue
        s3 = s3 or s3_objects.client()
        listing = functools.partial(s3_objects.objects, s3, s3_objects.parse(uri))
        objs = s3_objects.retried(
            listing, say, attempts=ATTEMPTS, backoff_s=BACKOFF_S, failed=lambda m: TransferFailed(f"streaming {m}")
        )
        size = sum(o.size for o in objs)
        say(f"data {uri} is streamed by each rank ({len(objs)} object(s), {size} bytes; no copy)")
    if s3 is not None:
        url = str(getattr(s3.meta, "endpoint_url", "") or "")
        scheme, sep, rest = url.partition("://")
        environ[ENDPOINT_ENV] = f"{scheme}{sep}{rest.rpartition('@')[2]}" if sep else url

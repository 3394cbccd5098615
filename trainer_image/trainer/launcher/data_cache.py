"""The data cache: an `s3://` input staged once into a folder every run on this filesystem reads (issue 35).

An entry is named by the input's identity: the URI and, for each of its objects, its key, version id (or ETag)
and size. So every run, retry, requeue and sweep trial that names the same object versions reads the same copy,
and a changed object is a new entry. Each object is downloaded with boto3's transfer manager into a temporary
folder beside the entries, checked (its size, and the checksum S3 gives: s3_objects.mismatch), and only then is
the folder published by one atomic rename; a partial download is never an entry. The entry's manifest records
every file's size and the CRC32 of each of its 8 MiB parts (s3_digests.py says why a CRC32), checked at each use: an entry that no longer
matches (a disk error, a hand edit) is moved aside and fetched again.

Staging runs under a lock file beside the entry (`fcntl.lockf`, a POSIX record lock, which NFS and Lustre
carry between hosts): on SLURM the nodes share the cache folder, one stages and the others wait, then read the
same copy. A transient failure (a dropped connection, a 5xx, a download that does not verify) is tried again
with exponential backoff; a missing object, missing credentials or a denied read is the user's to fix
(TrainerInputError, exit 2), named with its URI.
"""

from __future__ import annotations

import errno
import fcntl
import hashlib
import json
import os
import random
import shutil
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any

from .. import s3_digests, s3_objects
from ..errors import TrainerInputError
from ..s3_objects import ATTEMPTS, BACKOFF_S, S3Object, TransferFailed, TransientError
from ..s3_stream import STREAM_ENV

MANIFEST = "manifest.json"
DATA = "data"


@dataclass(frozen=True)
class Staged:
    uri: str
    path: Path
    """What the program reads: the object's file, or the prefix's folder."""
    entry: Path
    fetched: bool
    files: int
    size: int


def entry_name(uri: str, objs: list[S3Object]) -> str:
    text = "\n".join([uri, *(o.identity for o in objs)])
    return hashlib.sha256(text.encode()).hexdigest()[:40]


def _relative(uri: s3_objects.S3Uri, objs: list[S3Object]) -> dict[str, S3Object]:
    """Each object's file name in the entry: a single object's base name, a prefix's keys below it."""
    if len(objs) == 1 and objs[0].key == uri.key:
        return {PurePosixPath(uri.key).name: objs[0]}
    prefix = uri.key if not uri.key or uri.key.endswith("/") else uri.key + "/"
    named: dict[str, S3Object] = {}
    for obj in objs:
        rel = obj.key[len(prefix) :]
        parts = PurePosixPath(rel).parts
        if not rel or rel.startswith("/") or ".." in parts or "." in parts:
            raise TrainerInputError(f"s3://{uri.bucket}/{obj.key}: a key that cannot be a file under {uri.text}")
        named[rel] = obj
    return named


def check_entry(entry: Path) -> str | None:
    """Why a published entry cannot be used (None: every file there, its size and digests as recorded). An entry
    records a CRC32 per part (`crc32_parts`, `part_size` bytes each), checked in threads, as zlib and hashlib
    release the GIL; older entries, a sha256 per part (`sha256_parts`) or the whole file's (`sha256`), are
    checked as they were written."""
    try:
        manifest = json.loads((entry / MANIFEST).read_text())
        files = manifest["files"]
        checks: list[tuple[str, Path, int, int, str, str]] = []
        for rel, want in files.items():
            path = entry / DATA / rel
            try:
                size = path.stat().st_size
            except OSError:
                return f"{rel} is missing"
            if size != want["size"]:
                return f"{rel} has {size} bytes, {want['size']} were published"
            kind = next((k for k in ("crc32", "sha256") if f"{k}_parts" in want), None)
            if kind is None:
                checks.append((rel, path, -1, 0, "sha256", want["sha256"]))
                continue
            part_size, recorded = int(want["part_size"]), want[f"{kind}_parts"]
            if part_size <= 0:
                raise ValueError(f"{rel}: part_size {part_size}")
            if len(recorded) != s3_digests.parts_of(size, part_size):
                return f"{rel}: its manifest has {len(recorded)} parts, not {size} bytes' worth"
            checks += [(rel, path, i, part_size, kind, digest) for i, digest in enumerate(recorded)]
    except (OSError, ValueError, KeyError, TypeError) as exc:
        return f"its manifest cannot be read: {exc}"
    with ThreadPoolExecutor(max_workers=min(8, os.cpu_count() or 1)) as pool:
        for problem in pool.map(lambda check: _check_part(*check), checks):
            if problem is not None:
                return problem
    return None


def _check_part(rel: str, path: Path, index: int, part_size: int, kind: str, want: str) -> str | None:
    if index < 0:
        digest = s3_digests.file_digests(path, {"sha256"})["sha256"]
        return None if digest == want else f"{rel} has sha256 {digest}, {want} was published"
    if kind == "crc32":
        digest = s3_digests.crc_hex(s3_digests.part_crc(path, index, part_size))
    else:
        digest = s3_digests.part_sha256(path, index, part_size)
    if digest == want:
        return None
    start = index * part_size
    end = min(path.stat().st_size, start + part_size) - 1
    return f"{rel} part {index + 1} (bytes {start}-{end}) has {kind} {digest}, {want} was published"


@contextmanager
def _locked(lock: Path, say: Callable[[str], None], uri: str) -> Iterator[None]:
    fd = os.open(lock, os.O_RDWR | os.O_CREAT, 0o664)
    try:
        try:
            fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            if exc.errno not in (errno.EAGAIN, errno.EACCES):
                raise
            say(f"{uri}: another process is staging it into {lock.parent}; waiting for its copy")
            fcntl.lockf(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # closing drops the lock


def _fetch_verified(
    s3: Any, bucket: str, obj: S3Object, dest: Path, say: Callable[[str], None], attempts: int, backoff_s: float
) -> s3_digests.Fetched:
    uri = f"s3://{bucket}/{obj.key}"

    def fetch() -> s3_digests.Fetched:
        nonlocal obj
        fetched = s3_objects.download_digests(s3, bucket, obj, dest, s3_objects.needed(obj))
        reason = s3_objects.mismatch(obj, dest, fetched.checks)
        if reason and reason.startswith("MD5") and obj.md5_etag is None:
            obj = s3_objects.described(s3, bucket, obj)  # an SSE-KMS object's ETag is no MD5
            fetched.checks = s3_digests.file_digests(dest, s3_objects.needed(obj))
            reason = s3_objects.mismatch(obj, dest, fetched.checks)
        if reason:
            raise TransientError(f"{uri}: the download does not verify: {reason}")
        # no fsync: every use checks each file against the manifest, so a copy a crash left torn is
        # fetched again rather than read (and staging runs at the speed of the download itself)
        return fetched

    def failed(message: str) -> Exception:
        return TransferFailed(f"{message} (nothing was cached; check the endpoint and the network, then run again)")

    return s3_objects.retried(fetch, say, attempts=attempts, backoff_s=backoff_s, failed=failed,
                              cleanup=lambda: dest.unlink(missing_ok=True))  # fmt: skip


def _listed(
    s3: Any, uri: s3_objects.S3Uri, say: Callable[[str], None], attempts: int, backoff_s: float
) -> list[S3Object]:
    return s3_objects.retried(lambda: s3_objects.objects(s3, uri), say, attempts=attempts, backoff_s=backoff_s,
                              failed=TransferFailed)  # fmt: skip


def stage(
    uri: str,
    cache: Path,
    say: Callable[[str], None],
    *,
    s3: Any = None,
    attempts: int = ATTEMPTS,
    backoff_s: float = BACKOFF_S,
) -> Staged:
    """The input's verified copy in `cache`: the published entry when it checks out, else fetched and published."""
    parsed = s3_objects.parse(uri)
    s3 = s3 if s3 is not None else s3_objects.client()
    objs = _listed(s3, parsed, say, attempts, backoff_s)
    named = _relative(parsed, objs)
    key = entry_name(uri, objs)
    entry = cache / key
    single = len(objs) == 1 and objs[0].key == parsed.key
    path = entry / DATA / next(iter(named)) if single else entry / DATA
    size = sum(o.size for o in objs)
    cache.mkdir(parents=True, exist_ok=True)
    with _locked(cache / f"{key}.lock", say, uri):
        if entry.is_dir():
            problem = check_entry(entry)
            if problem is None:
                return Staged(uri, path, entry, fetched=False, files=len(objs), size=size)
            say(f"{uri}: the cached copy {entry} is corrupt ({problem}); fetching it again")
            aside = cache / f".tmp-{key}-corrupt-{os.getpid()}"
            os.rename(entry, aside)
            shutil.rmtree(aside, ignore_errors=True)
        for stale in cache.glob(f".tmp-{key}-*"):  # a stager killed mid-download left it; we hold the lock
            shutil.rmtree(stale, ignore_errors=True)
        tmp = cache / f".tmp-{key}-{os.getpid()}-{random.getrandbits(32):08x}"
        try:
            files: dict[str, dict[str, Any]] = {}
            for rel, obj in named.items():
                dest = tmp / DATA / rel
                dest.parent.mkdir(parents=True, exist_ok=True)
                fetched = _fetch_verified(s3, parsed.bucket, obj, dest, say, attempts, backoff_s)
                files[rel] = {"size": obj.size, "part_size": fetched.part_size, "crc32_parts": fetched.parts,
                              "etag": obj.etag, "version_id": obj.version_id}  # fmt: skip
            manifest = {"uri": uri, "objects": [o.identity for o in objs], "files": files}
            (tmp / MANIFEST).write_text(json.dumps(manifest, indent=1, sort_keys=True))
            os.rename(tmp, entry)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
    return Staged(uri, path, entry, fetched=True, files=len(objs), size=size)


def _endpoint(s3: Any) -> str:
    url = str(getattr(s3.meta, "endpoint_url", "") or "")
    scheme, sep, rest = url.partition("://")
    return f"{scheme}{sep}{rest.rpartition('@')[2]}" if sep else url  # never a user:password@ in a log


def stage_inputs(
    environ: dict[str, str] | Any, program: list[str], cache: Path, say: Callable[[str], None]
) -> list[str]:
    """Stage every `TRAINER_DATA_<NAME>` that is an `s3://` URI into `cache` before the workers start: the
    variable, and each word of the program that is exactly that URI, become the local copy's path."""
    s3 = None
    streamed = {f"TRAINER_DATA_{n.upper().replace('-', '_')}" for n in environ.get(STREAM_ENV, "").split(",") if n}
    for name in sorted(k for k in environ if k.startswith("TRAINER_DATA_")):
        uri = environ[name]
        if not uri.startswith("s3://") or name in streamed:  # mode: stream: each rank reads it (s3_stream.py)
            continue
        if s3 is None:
            s3 = s3_objects.client()
            say(f"staging s3:// inputs into {cache} (endpoint {_endpoint(s3)})")
        started = time.monotonic()
        staged = stage(uri, cache, say, s3=s3)
        took = time.monotonic() - started
        how = f"fetched {staged.files} object(s), {staged.size} bytes" if staged.fetched else "the cached copy verified"
        say(f"data {uri} -> {staged.path} ({how}, {took:.1f} s)")
        environ[name] = str(staged.path)
        program = [str(staged.path) if word == uri else word for word in program]
    return program

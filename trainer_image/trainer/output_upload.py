"""A run's output folder uploaded to `output_dir: s3://bucket/prefix` at the end of each attempt (issue 35 §4).

The trainer writes its output folder locally as on every target (the final model and model.json, metrics.jsonl,
summary.json, progress.json, tensorboard/); rank 0's launcher then uploads it to `<prefix>/<run uid>/`, whatever
the attempt's end (a failed or preempted attempt uploads what it has). Each file goes through boto3's transfer
manager (`upload_file`: multipart and concurrent for large files) with S3 computing a SHA256 checksum
(`ChecksumAlgorithm`, PutObject/CreateMultipartUpload in botocore's s3 service model), and is checked after:
a HEAD with `ChecksumMode=ENABLED` must give its size and, where S3 keeps a full-object checksum, this file's
(s3_objects.mismatch, the same check a download gets). An S3 PUT is atomic per object: a cut upload never
becomes the object, it leaves the key as it was (a multipart upload is not an object until it completes).

A set of files is not atomic, so the manifest `_complete` (each file's key below the run's prefix, its size and
sha256, the attempt's exit code) is written last, and deleted first when an attempt starts its upload: a reader
(`trainctl pull`) takes the files only when `_complete` is there, and only as it lists them. A transient
failure is tried again with the data cache's backoff (s3_objects.retried); after the last try the upload fails
with the URI and the last error, and `_complete` is absent.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

from . import s3_digests, s3_objects
from .s3_objects import ATTEMPTS, BACKOFF_S, TransferFailed, TransientError

COMPLETE = "_complete"
NEEDS = "s3:PutObject, s3:GetObject and s3:DeleteObject"
UID_ENV = "TRAINCTL_RUN_UID"


@dataclass(frozen=True)
class Uploaded:
    uri: str
    files: int
    size: int


def destination(prefix: str, environ: dict[str, str] | Any) -> str:
    """`<prefix>/<run uid>/`: the uid submit gave the run (TRAINCTL_RUN_UID), which no engine repeats; a run
    started by hand, with none, gets `manual-<unix time>`."""
    run = environ.get(UID_ENV) or f"manual-{int(time.time())}"
    return f"{prefix.rstrip('/')}/{run}/"


def _files(folder: Path) -> dict[str, Path]:
    """Every regular file under `folder`, by its path below it (a link is not followed, a temp file is skipped)."""
    found: dict[str, Path] = {}
    for path in sorted(folder.rglob("*")):
        rel = path.relative_to(folder).as_posix()
        if path.is_file() and not path.is_symlink() and not path.name.startswith(".tmp") and rel != COMPLETE:
            found[rel] = path
    return found


def _put_verified(s3: Any, bucket: str, key: str, path: Path) -> dict[str, Any]:
    from boto3.s3.transfer import TransferConfig

    uri = f"s3://{bucket}/{key}"
    digests = s3_digests.file_digests(path, {"sha256"})
    try:
        s3.upload_file(str(path), bucket, key, ExtraArgs={"ChecksumAlgorithm": "SHA256"},
                       Config=TransferConfig(max_concurrency=8))  # fmt: skip
        head = s3.head_object(Bucket=bucket, Key=key, ChecksumMode="ENABLED")
    except s3_objects.retried_errors() as exc:
        raise s3_objects.explain(uri, exc, NEEDS) from None
    obj = s3_objects.from_head(head, key, headed=True)
    reason = s3_objects.mismatch(obj, path, {**digests, **s3_digests.file_digests(path, s3_objects.needed(obj))})
    if reason:
        raise TransientError(f"{uri}: the upload does not verify: {reason}")
    return {"size": obj.size, "sha256": digests["sha256"]}


def _call(uri: str, call: Callable[[], Any]) -> Any:
    try:
        return call()
    except s3_objects.retried_errors() as exc:
        raise s3_objects.explain(uri, exc, NEEDS) from None


def upload(
    folder: Path,
    dest: str,
    say: Callable[[str], None],
    *,
    exit_code: int | None = None,
    s3: Any = None,
    attempts: int = ATTEMPTS,
    backoff_s: float = BACKOFF_S,
) -> Uploaded:
    """Every file of `folder` to `dest` (an s3:// prefix ending with `/`), each verified, then `_complete`."""
    parsed = s3_objects.parse(dest)
    s3 = s3 if s3 is not None else s3_objects.client()
    prefix = parsed.key if parsed.key.endswith("/") else parsed.key + "/"
    marker = prefix + COMPLETE

    def retried(call: Callable[[], Any]) -> Any:
        return s3_objects.retried(call, say, attempts=attempts, backoff_s=backoff_s, failed=_failed(dest))

    # an earlier attempt's manifest must not vouch for this attempt's files while they change
    retried(lambda: _call(f"s3://{parsed.bucket}/{marker}", lambda: s3.delete_object(Bucket=parsed.bucket, Key=marker)))
    files: dict[str, dict[str, Any]] = {}
    for rel, path in _files(folder).items():
        files[rel] = retried(partial(_put_verified, s3, parsed.bucket, prefix + rel, path))
    manifest = {"run_uid": os.environ.get(UID_ENV), "exit_code": exit_code, "uploaded_at": time.time(),
                "files": files}  # fmt: skip
    body = json.dumps(manifest, indent=1, sort_keys=True).encode()
    retried(
        lambda: _call(
            f"s3://{parsed.bucket}/{marker}",
            lambda: s3.put_object(
                Bucket=parsed.bucket, Key=marker, Body=body, ContentType="application/json", ChecksumAlgorithm="SHA256"
            ),
        )
    )
    return Uploaded(dest, len(files), sum(f["size"] for f in files.values()))


def _failed(dest: str) -> Callable[[str], Exception]:
    def make(message: str) -> Exception:
        return TransferFailed(f"output upload to {dest} failed: {message} ({COMPLETE} not written; the local output "
                            "folder is whole: run the upload again, `python -m trainer.output_upload FOLDER URI`)")  # fmt: skip

    return make


def after_attempt(prefix: str, exit_code: int, say: Callable[[str], None]) -> int:
    """The launcher's step at the end of an attempt on node 0: the output folder (TRAINER_OUTPUT_DIR) to
    `<prefix>/<run uid>/`. Returns the attempt's exit code, or 1 where training succeeded and the upload did not
    (a failure.json, `source: launcher`, names the URI, so `trainctl status` says what failed)."""
    from . import first_failure, records
    from .errors import TrainerInputError

    folder = os.environ.get("TRAINER_OUTPUT_DIR")
    if not folder or not Path(folder).is_dir():
        say(f"no output folder to upload to {prefix} ({folder or 'TRAINER_OUTPUT_DIR is not set'})")
        return exit_code
    dest = destination(prefix, os.environ)
    started = time.monotonic()
    try:
        done = upload(Path(folder), dest, say, exit_code=exit_code)
    except (TransferFailed, TrainerInputError) as exc:
        say(f"error: {exc}")
        if exit_code != 0:
            return exit_code  # the attempt's own failure stays its cause
        rec = {**records.stamp(), "kind": "error", "source": "launcher", "node": first_failure.scheduler_node(),
               "exit_code": 1, "exception": type(exc).__name__, "message": str(exc), "failed_at": time.time()}  # fmt: skip
        records.write_failure(Path(folder), rec)
        return 1
    say(f"output {folder} -> {dest} ({done.files} file(s), {done.size} bytes, verified; {COMPLETE} written, "
        f"{time.monotonic() - started:.1f} s)")  # fmt: skip
    return exit_code


def main(argv: list[str] | None = None) -> int:
    """`python -m trainer.output_upload FOLDER s3://bucket/prefix/<run uid>/`: the upload again, by hand."""
    import sys

    from .errors import TrainerInputError

    args = sys.argv[1:] if argv is None else argv
    if len(args) != 2:
        print("usage: python -m trainer.output_upload FOLDER s3://bucket/prefix/<run uid>/", file=sys.stderr)
        return 2
    say = lambda text: print(text, file=sys.stderr, flush=True)  # noqa: E731
    try:
        done = upload(Path(args[0]), args[1], say)
    except (TransferFailed, TrainerInputError) as exc:
        say(f"error: {exc}")
        return 1
    say(f"{args[0]} -> {done.uri} ({done.files} file(s), {done.size} bytes, verified; {COMPLETE} written)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

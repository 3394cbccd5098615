"""`trainctl pull` of a run whose output went to `output_dir: s3://...` (docs/data.md, outputs): from any target,
the files node 0's launcher uploaded to `<prefix>/<run uid>/`, as its `_complete` manifest lists them.

The launcher (trainer/output_upload.py) writes `_complete` last, after every file verified, and deletes it first
when an attempt starts its upload; so a prefix without it is an upload that did not finish, and pull refuses it
rather than copy a partial set. Each file is fetched with boto3's transfer manager and checked against the
manifest (size and sha256) before pull returns. boto3 is imported lazily, and finds the endpoint
(`AWS_ENDPOINT_URL`, the config file's `endpoint_url`) and the credentials as the AWS CLI does.
"""

from __future__ import annotations

import json
from pathlib import Path, PurePosixPath
from typing import Any

from ..errors import EngineError
from .transfer import Fetched, sha256_of

COMPLETE = "_complete"
"""The manifest the trainer's launcher writes last (trainer/output_upload.py COMPLETE; the SDK never imports it)."""


def manifest(uri: str, s3: Any = None) -> dict[str, Any] | None:
    """The output's `_complete` manifest, or None where it is absent (the upload did not finish)."""
    import boto3
    from botocore.exceptions import ClientError

    s3 = s3 if s3 is not None else boto3.session.Session().client("s3")
    bucket, _, prefix = uri.removeprefix("s3://").partition("/")
    try:
        body = s3.get_object(Bucket=bucket, Key=prefix + COMPLETE)["Body"].read()
    except ClientError as exc:
        code = str(exc.response.get("Error", {}).get("Code", ""))
        if code in ("NoSuchKey", "404"):
            return None
        raise EngineError(f"{uri}{COMPLETE}: {code or exc}") from None
    found: dict[str, Any] = json.loads(body)
    return found


def fetch(uri: str, dest: Path) -> Fetched:
    """Every file `uri`'s `_complete` lists, into `dest`, each checked (size and sha256)."""
    import boto3
    from boto3.s3.transfer import TransferConfig
    from botocore.exceptions import BotoCoreError, ClientError

    s3 = boto3.session.Session().client("s3")
    bucket, _, prefix = uri.removeprefix("s3://").partition("/")
    try:
        listed = manifest(uri, s3)
    except (BotoCoreError, ClientError) as exc:
        raise EngineError(f"{uri}: {exc}") from None
    if listed is None:
        raise EngineError(
            f"{uri} has no {COMPLETE}: the run's output upload did not finish (the attempt is running, or its "
            "upload failed: `trainctl status` says why); nothing was copied"
        )
    files: dict[str, dict[str, Any]] = listed.get("files", {})
    for rel, want in sorted(files.items()):
        parts = PurePosixPath(rel).parts
        if not rel or rel.startswith("/") or ".." in parts:
            raise EngineError(f"{uri}{COMPLETE} lists {rel!r}, which cannot be a file under {dest}")
        path = dest / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        try:
            s3.download_file(bucket, prefix + rel, str(path), Config=TransferConfig(max_concurrency=8))
        except (BotoCoreError, ClientError, boto3.exceptions.Boto3Error) as exc:
            raise EngineError(f"{uri}{rel}: {exc}") from None
        size, digest = path.stat().st_size, sha256_of(path)
        if size != want["size"] or digest != want["sha256"]:
            raise EngineError(
                f"{uri}{rel}: {size} bytes, sha256 {digest}; {COMPLETE} says {want['size']} bytes, sha256 "
                f"{want['sha256']} (changed after the upload?)"
            )
    return Fetched(dest, uri)

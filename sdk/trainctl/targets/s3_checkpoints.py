"""Checkpoints in an S3 prefix, fetched for `--resume-from`: a SageMaker run's checkpoint prefix (what SageMaker
synced /opt/ml/checkpoints to), or any prefix given as `--resume-from s3://bucket/prefix` (what
`checkpoint.dir: s3://...` mirrors from any target, or step-* folders put there by hand).

The listing first; then the step-* folders newest first, one at a time, until `accept` takes one
(transfer.fetch_newest: the trainer's own check decides); without `accept` (a command job's opaque folder)
every file. boto3 is imported lazily and finds the endpoint (`AWS_ENDPOINT_URL`, the config file's
`endpoint_url`) and the credentials as the AWS CLI does.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path, PurePosixPath
from typing import Any

from .transfer import Accept, Fetched, ResumeError, fetch_newest, newest_steps


def fetch(uri: str, dest: Path, accept: Accept | None, s3: Any = None) -> Fetched:
    """The checkpoints under `uri` into `dest` (see the module's note); `s3`: a client (else the default one)."""
    bucket, _, prefix = uri.removeprefix("s3://").partition("/")
    if not uri.startswith("s3://") or not bucket:
        raise ResumeError(f"--resume-from {uri}: not an s3://bucket/prefix URI")
    if s3 is None:
        import boto3

        s3 = boto3.session.Session().client("s3")
    prefix = prefix.rstrip("/") + "/" if prefix.strip("/") else ""
    root = f"s3://{bucket}/{prefix}"
    files = {
        key: rel for key in _call(f"list {root}", _list_keys, s3, bucket, prefix) if (rel := _relative(key, prefix))
    }

    def get(keys: dict[str, PurePosixPath], folder: Path) -> None:
        for key, rel in sorted(keys.items()):
            target = folder.joinpath(*rel.parts)
            target.parent.mkdir(parents=True, exist_ok=True)
            _call(f"download s3://{bucket}/{key}", s3.download_file, bucket, key, str(target))

    if accept is None:
        if not files:
            raise ResumeError(f"--resume-from: the checkpoint prefix {root} is empty")
        get(files, dest)
        return Fetched(dest, root)

    def copy(step: str, folder: Path) -> str:
        get(
            {k: PurePosixPath(*r.parts[1:]) for k, r in files.items() if r.parts[0] == step and len(r.parts) > 1},
            folder,
        )
        return f"{root}{step}/"

    return fetch_newest(newest_steps(r.parts[0] for r in files.values()), copy, dest, accept, root)


def _call(what: str, fn: Callable[..., Any], *args: Any) -> Any:
    """One S3 call; botocore's errors as a ResumeError (exit 2: nothing was submitted) saying what was done."""
    from botocore.exceptions import BotoCoreError, ClientError, NoCredentialsError

    try:
        return fn(*args)
    except NoCredentialsError:
        raise ResumeError(f"{what}: no AWS credentials (aws configure, or set AWS_PROFILE)") from None
    except ClientError as exc:
        err = exc.response.get("Error", {})
        raise ResumeError(f"{what}: S3 said {err.get('Code', '?')}: {err.get('Message', exc)}") from None
    except BotoCoreError as exc:
        raise ResumeError(f"{what}: {exc}") from None


def _list_keys(s3: Any, bucket: str, prefix: str) -> list[str]:
    """Every key under the prefix (list_objects_v2, all pages)."""
    pages = s3.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix)
    return [obj["Key"] for page in pages for obj in page.get("Contents", [])]


def _relative(key: str, prefix: str) -> PurePosixPath | None:
    """A key's path below the prefix; None for a folder marker or a path that would leave the folder."""
    rel = PurePosixPath(key[len(prefix) :])
    if key.endswith("/") or not rel.parts or rel.is_absolute() or ".." in rel.parts:
        return None
    return rel

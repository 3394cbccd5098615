"""Local data on SageMaker (issue 35 §3): at submit, each data input that is a path here is uploaded once to
S3, content-addressed, `<output prefix>/trainctl-data/<sha256>/`, and the channel points at that prefix.

The sha256 is over the input's content as a listing: each file's path below the input (a single file: its base
name), size and sha256, sorted. So the same bytes under the same names are one prefix, whoever uploads them and
whatever they are called here. The upload is skipped when the prefix is already complete: the manifest
`<output prefix>/trainctl-data/<sha256>.json` (outside the channel's prefix, so the job never downloads it) is
written last, after every file, so its presence means every file is there. `-O local=true` (containers here)
keeps the path, as the SageMaker SDK's local mode does (`file://`).

The SageMaker SDK does the same for an estimator's local `inputs` (sagemaker/estimator.py `_stage_user_code` and
sagemaker/session.py `upload_data`: a local path is uploaded to the default bucket before CreateTrainingJob),
but under a new prefix per job; content-addressing is ours.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ...errors import JobError
from ...spec.job_spec import JobSpec
from ..transfer import sha256_of
from .aws_calls import _parse_s3, aws_call
from .request import output_uri

if TYPE_CHECKING:
    import boto3

PREFIX = "trainctl-data"
PLACEHOLDER = "<sha256>"
"""What render shows for the content's sha256, which only submit computes (render reads no file)."""


def local_inputs(job: JobSpec) -> dict[str, str]:
    """{name: path} of the data inputs that are paths on this machine (relative: from the job file's folder)."""
    found = {}
    for name, uri in sorted(job.data.items()):
        if uri.startswith("s3://"):
            continue
        path = uri.removeprefix("file://")
        found[name] = os.path.normpath(os.path.join(str(job.base_dir or os.getcwd()), os.path.expanduser(path)))
    return found


def placeholders(job: JobSpec) -> tuple[JobSpec, list[str]]:
    """For render (which reads no file): each local input named by its prefix with `<sha256>` in place of the
    content's hash, and a note saying what submit does."""
    inputs = local_inputs(job)
    if not inputs:
        return job, []
    data = {**job.data, **{name: uploaded_prefix(job, PLACEHOLDER) for name in inputs}}
    notes = [
        f"data.{name}: {path} is uploaded at submit to {uploaded_prefix(job, PLACEHOLDER)} ({PLACEHOLDER}: of its "
        "content), once: a prefix already holding that content is used as it is"
        for name, path in inputs.items()
    ]
    return job.model_copy(update={"data": data}), notes


def uploaded_prefix(job: JobSpec, digest: str) -> str:
    base = (output_uri(job) or "").rstrip("/")
    return f"{base}/{PREFIX}/{digest}/"


def _files(path: Path) -> list[tuple[str, Path]]:
    if path.is_file():
        return [(path.name, path)]
    if path.is_dir():
        return sorted((p.relative_to(path).as_posix(), p) for p in path.rglob("*") if p.is_file())
    raise FileNotFoundError(path)


def content(path: Path) -> tuple[str, list[dict[str, Any]]]:
    """(sha256 of the listing, the listing): each file's name, size and sha256."""
    listing = [{"name": rel, "size": p.stat().st_size, "sha256": sha256_of(p)} for rel, p in _files(path)]
    text = json.dumps(listing, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest(), listing


def upload_inputs(job: JobSpec, session: boto3.Session, say: Any = None) -> JobSpec:
    """The job with each local data input uploaded (or found already uploaded) and named by its S3 prefix."""
    inputs = local_inputs(job)
    if not inputs:
        return job
    problems = [f"data.{name}: {path} does not exist" for name, path in inputs.items() if not os.path.exists(path)]
    if problems:
        raise JobError(problems)
    s3 = session.client("s3")
    data = dict(job.data)
    for name, path in inputs.items():
        digest, listing = content(Path(path))
        prefix = uploaded_prefix(job, digest)
        bucket, key = _parse_s3(prefix)
        manifest = key.rstrip("/") + ".json"
        if not _exists(s3, bucket, manifest):
            for item, (rel, file) in zip(listing, _files(Path(path)), strict=True):
                aws_call(f"upload {path} to s3://{bucket}/{key}{rel}", s3.upload_file, Filename=str(file),
                         Bucket=bucket, Key=f"{key}{rel}", ExtraArgs={"ChecksumAlgorithm": "SHA256"})  # fmt: skip
                assert item["name"] == rel
            body = json.dumps({"source": path, "files": listing}, indent=1, sort_keys=True).encode()
            aws_call(f"upload s3://{bucket}/{manifest}", s3.put_object, Bucket=bucket, Key=manifest, Body=body)
            if say:
                say(f"data.{name}: {path} uploaded to {prefix}")
        elif say:
            say(f"data.{name}: {path} is already at {prefix} (same content): nothing uploaded")
        data[name] = prefix
    return job.model_copy(update={"data": data})


def _exists(s3: Any, bucket: str, key: str) -> bool:
    from botocore.exceptions import ClientError

    try:
        s3.head_object(Bucket=bucket, Key=key)
        return True
    except ClientError as exc:
        if int(exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode") or 0) == 404:
            return False
        return bool(aws_call(f"check s3://{bucket}/{key}", s3.head_object, Bucket=bucket, Key=key))

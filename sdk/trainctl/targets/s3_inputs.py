"""At submit, what this machine can tell about a job's `s3://` inputs before anything is queued (issue 35 §6):
a missing bucket or object, missing credentials, a denied read. Each is a problem naming the field, the URI and
what to do (exit 2). The trainer's launcher checks the same again where the data is read (trainer/launcher/data_cache.py),
and a store this machine cannot reach is left to it: that is no invalid input.

boto3 is imported here, lazily: `submit` and `validate` only, never render (docs/architecture.md). It finds the
endpoint (`AWS_ENDPOINT_URL`, the config file's `endpoint_url`) and the credentials as the AWS CLI does.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

_DENIED = {"AccessDenied", "403", "Forbidden", "AllAccessDisabled"}
_BAD_KEYS = {"InvalidAccessKeyId", "SignatureDoesNotMatch", "ExpiredToken", "InvalidToken"}


def problems(inputs: Mapping[str, str], *, here_reads_it: bool) -> list[str]:
    """`here_reads_it`: the run reads the data with this machine's credentials (local), so missing or refused
    credentials and a denied read are problems too; elsewhere (a SLURM node may have its own role) only a missing
    bucket or object is."""
    if not inputs:
        return []
    import boto3
    from botocore.exceptions import BotoCoreError, ClientError, NoCredentialsError, PartialCredentialsError

    s3 = boto3.session.Session().client("s3")
    found: list[str] = []
    for name, uri in sorted(inputs.items()):
        head = f"data.{name}: {uri}"
        try:
            if not _exists(s3, uri):
                found.append(f"{head}: no such object, and no objects under it; check the key (a prefix ends with /)")
        except (NoCredentialsError, PartialCredentialsError):
            if here_reads_it:
                found.append(
                    f"{head}: no AWS credentials found here; set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, "
                    "AWS_PROFILE, or give this machine a role"
                )
        except ClientError as exc:
            code = str(exc.response.get("Error", {}).get("Code", ""))
            status = int(exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode") or 0)
            if code == "NoSuchBucket":
                found.append(f"{head}: no such bucket; check the bucket's name (and AWS_ENDPOINT_URL)")
            elif here_reads_it and code in _BAD_KEYS:
                found.append(f"{head}: the store refused the credentials ({code}); check the keys or the profile")
            elif here_reads_it and (code in _DENIED or status == 403):
                found.append(f"{head}: access denied; the credentials need s3:GetObject and s3:ListBucket on it")
        except BotoCoreError:
            pass  # unreachable from here (or a transient error): the launcher retries, then fails naming the URI
    return found


def _exists(s3: Any, uri: str) -> bool:
    """The object, or any object under the prefix (a key without `/` that has objects under `key/` is one)."""
    from botocore.exceptions import ClientError

    bucket, _, key = uri.removeprefix("s3://").partition("/")
    prefix = key
    if key and not key.endswith("/"):
        try:
            s3.head_object(Bucket=bucket, Key=key)
            return True
        except ClientError as exc:
            # a HEAD has no body: a missing bucket is a bare 404 too, which the listing below names; a bare 403
            # may be refused keys, which a listing's error names (else it is the read that is denied)
            status = int(exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode") or 0)
            if status == 403:
                s3.list_objects_v2(Bucket=bucket, Prefix=key, MaxKeys=1)
            if status != 404:
                raise
        prefix = key + "/"
    listed = s3.list_objects_v2(Bucket=bucket, Prefix=prefix, MaxKeys=1)
    return bool(listed.get("KeyCount") or listed.get("Contents"))

"""What an `s3://` input is, as the object store says: its objects (key, size, ETag, version id, the checksum S3
keeps), each object's download through boto3's transfer manager, and what an error from the store means.

boto3 finds the endpoint and the credentials itself: `AWS_ENDPOINT_URL` (or `AWS_ENDPOINT_URL_S3`, or the
config file's `endpoint_url`) for an S3-compatible store, and the standard chain for keys (environment, config
and credentials files, web identity / IRSA, the container or instance role). Nothing here prints a credential:
messages name the URI, the error's code and what to do.
"""

from __future__ import annotations

import random
import re
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from .errors import TrainerInputError
from .s3_digests import PART, Fetched, PartWriter

_MISSING = {"NoSuchKey", "404", "NotFound"}
_DENIED = {"AccessDenied", "403", "Forbidden", "AllAccessDisabled"}
_BAD_KEYS = {"InvalidAccessKeyId", "SignatureDoesNotMatch", "ExpiredToken", "InvalidToken", "TokenRefreshRequired"}
T = TypeVar("T")
_THROTTLED = {"SlowDown", "Throttling", "ThrottlingException", "RequestTimeout", "RequestTimeTooSkewed"}
ATTEMPTS = 5
BACKOFF_S = 1.0
"""Every S3 transfer's budget (staging, streaming, uploads): tries, and the first wait, doubled after each."""
IO_CHUNK = 1 << 20
"""What each of s3transfer's GET threads reads from a body and hands on at a time when staging (its default:
256 KiB): a quarter of the reads, writes and digest updates, each of which gives the GIL away and back."""


class TransferFailed(Exception):
    """An S3 transfer (staging an input, streaming it, uploading the output) that failed after every try; its
    message names the URI, the last error and what to check."""


class TransientError(Exception):
    """A failure worth another try (a dropped connection, a 5xx, throttling, a download that does not verify)."""


@dataclass(frozen=True)
class S3Uri:
    bucket: str
    key: str

    @property
    def text(self) -> str:
        return f"s3://{self.bucket}/{self.key}"


def parse(uri: str) -> S3Uri:
    if not uri.startswith("s3://"):
        raise TrainerInputError(f"{uri}: not an s3:// URI")
    bucket, _, key = uri.removeprefix("s3://").partition("/")
    if not bucket:
        raise TrainerInputError(f"{uri}: no bucket; expected s3://bucket/key or s3://bucket/prefix/")
    return S3Uri(bucket, key)


_MD5_ETAG = re.compile(r"^[0-9a-f]{32}$")
"""An ETag that is a single-part upload's MD5 (a multipart one ends in -N)."""


@dataclass(frozen=True)
class S3Object:
    """One object as the store describes it. `checksum` is S3's full-object checksum, (algorithm, base64)."""

    key: str
    size: int
    etag: str
    version_id: str | None = None
    checksum: tuple[str, str] | None = None
    md5_etag: bool | None = None
    """The ETag is the content's MD5: a HEAD said the object is not SSE-KMS/SSE-C encrypted; None: a listing
    does not say (an MD5 mismatch then asks with a HEAD, `described`)."""

    @property
    def identity(self) -> str:
        """The object's version: its version id where the bucket keeps versions, else its ETag."""
        return f"{self.key} {self.version_id or self.etag} {self.size}"


def needed(obj: S3Object) -> set[str]:
    """The S3 checks a download of `obj` is verified with (`mismatch`): its full-object SHA256 or CRC32, else MD5
    (the slowest) where a single-part ETag is the one check S3 gives."""
    if obj.checksum and obj.checksum[0] in ("SHA256", "CRC32"):
        return {obj.checksum[0]}
    if obj.md5_etag is not False and _MD5_ETAG.match(obj.etag):
        return {"md5"}
    return set()


def mismatch(obj: S3Object, path: Path, digests: dict[str, str]) -> str | None:
    """Why a downloaded file is not the object (size, then the checksum S3 gives: its full-object SHA256 or
    CRC32, else a single-part ETag's MD5), or None. Other algorithms (CRC32C, CRC64NVME, SHA1) and multipart
    ETags leave size and the transfer's own checks."""
    size = path.stat().st_size
    if size != obj.size:
        return f"{size} bytes, the object has {obj.size}"
    if obj.checksum and obj.checksum[0] in ("SHA256", "CRC32"):
        algorithm, value = obj.checksum
        return None if digests[algorithm] == value else f"{algorithm} {digests[algorithm]}, S3 says {value}"
    if obj.md5_etag is not False and _MD5_ETAG.match(obj.etag) and digests["md5"] != obj.etag:
        return f"MD5 {digests['md5']}, the ETag says {obj.etag}"
    return None


def client(user_agent_extra: str | None = None) -> Any:
    """An S3 client from boto3's default session: its endpoint and credential chain, as the AWS CLI's."""
    try:
        import boto3
        from botocore.config import Config
    except ImportError as exc:  # pragma: no cover - the trainer image carries boto3
        raise TrainerInputError("s3:// data needs boto3 (the trainer image carries it; `pip install boto3`)") from exc
    return boto3.session.Session().client("s3", config=Config(user_agent_extra=user_agent_extra))


def retried(
    call: Callable[[], T],
    say: Callable[[str], None],
    *,
    attempts: int,
    backoff_s: float,
    failed: Callable[[str], Exception],
    cleanup: Callable[[], None] | None = None,
) -> T:
    """`call()`, tried again on a TransientError with exponential backoff (backoff_s * 1, 2, 4, ..., jittered),
    `attempts` tries in all; after the last, `failed(message)` is raised. `cleanup` runs after each failed try."""
    for attempt in range(1, attempts + 1):
        try:
            return call()
        except TransientError as exc:
            if cleanup is not None:
                cleanup()
            if attempt == attempts:
                raise failed(f"{exc}; gave up after {attempts} tries") from None
            delay = backoff_s * 2 ** (attempt - 1) * (0.5 + random.random())
            say(f"{exc}; trying again in {delay:.1f} s ({attempt}/{attempts})")
            time.sleep(delay)
    raise AssertionError("unreachable")


def explain(uri: str, exc: BaseException, needs: str = "s3:GetObject and s3:ListBucket") -> Exception:
    """A store error as one line naming the URI and what to do: `TrainerInputError` (exit 2, never retried) for a
    missing bucket or object, missing or refused credentials and a denied request (the credentials need `needs`);
    `TransientError` otherwise."""
    from botocore.exceptions import ClientError, NoCredentialsError, PartialCredentialsError

    if isinstance(exc, (NoCredentialsError, PartialCredentialsError)):
        return TrainerInputError(
            f"{uri}: no AWS credentials found; give the node a role, or set AWS_ACCESS_KEY_ID and "
            "AWS_SECRET_ACCESS_KEY (through `secrets:`), or a profile in the AWS config file"
        )
    if isinstance(exc, ClientError):
        error = exc.response.get("Error", {})
        code = str(error.get("Code", ""))
        status = int(exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode") or 0)
        if code == "NoSuchBucket":
            return TrainerInputError(f"{uri}: no such bucket; check the bucket's name (and AWS_ENDPOINT_URL)")
        if code in _MISSING or status == 404:
            return TrainerInputError(f"{uri}: no such object; check the key (a prefix ends with /)")
        if code in _BAD_KEYS:
            return TrainerInputError(f"{uri}: the store refused the credentials ({code}); check the keys or role")
        if code in _DENIED or status == 403:
            return TrainerInputError(f"{uri}: access denied; the credentials need {needs}")
        if code in _THROTTLED or status >= 500:
            return TransientError(f"{uri}: {code or status} from the store")
        return TrainerInputError(f"{uri}: {code}: {error.get('Message', '')}")
    return TransientError(f"{uri}: {type(exc).__name__}: {exc}")


def retried_errors() -> tuple[type[BaseException], ...]:
    from boto3.exceptions import Boto3Error
    from botocore.exceptions import BotoCoreError, ClientError
    from s3transfer.exceptions import RetriesExceededError

    # boto3's download_file re-raises s3transfer's RetriesExceededError as its own (a Boto3Error)
    return (BotoCoreError, ClientError, RetriesExceededError, Boto3Error, OSError)


def from_head(head: dict[str, Any], key: str, headed: bool = False) -> S3Object:
    checksum = None
    multipart = "-" in str(head.get("ETag", ""))
    # a multipart upload's checksum is over its parts (COMPOSITE, "...-N") unless S3 says FULL_OBJECT; where it
    # says neither (older stores, moto), only a single-part object's checksum is of the object itself
    whole = head.get("ChecksumType") == "FULL_OBJECT" or ("ChecksumType" not in head and not multipart)
    for algorithm in ("SHA256", "CRC32", "SHA1", "CRC32C", "CRC64NVME"):
        value = head.get(f"Checksum{algorithm}")
        if value and "-" not in value and whole:
            checksum = (algorithm, value)
            break
    return S3Object(
        key=key,
        size=int(head["ContentLength"] if "ContentLength" in head else head["Size"]),
        etag=str(head.get("ETag", "")).strip('"'),
        version_id=head.get("VersionId") if head.get("VersionId") not in (None, "null") else None,
        checksum=checksum,
        md5_etag=(head.get("ServerSideEncryption") != "aws:kms" and not head.get("SSECustomerAlgorithm"))
        if headed
        else None,
    )


def described(s3: Any, bucket: str, obj: S3Object) -> S3Object:
    """A listed object with what only a HEAD says (its encryption, its checksum), at the listed version."""
    extra = {"VersionId": obj.version_id} if obj.version_id else {}
    try:
        head = s3.head_object(Bucket=bucket, Key=obj.key, ChecksumMode="ENABLED", **extra)
    except retried_errors() as exc:
        raise explain(f"s3://{bucket}/{obj.key}", exc) from None
    return from_head(head, obj.key, headed=True)


def objects(s3: Any, uri: S3Uri) -> list[S3Object]:
    """The objects an input names: the one object, or every object under a prefix (a key that ends with `/`,
    or a key with no object of its own that has objects under `key/`). Folder markers (`.../`) are skipped."""
    errors = retried_errors()
    if uri.key and not uri.key.endswith("/"):
        try:
            head = s3.head_object(Bucket=uri.bucket, Key=uri.key, ChecksumMode="ENABLED")
            return [from_head(head, uri.key, headed=True)]
        except errors as exc:
            found = explain(uri.text, exc)
            if "access denied" in str(found):
                # a HEAD's 403 has no body to say why: a listing's error names refused keys, else it is the read
                _listed(s3, S3Uri(uri.bucket, uri.key), named=uri.text)
                raise found from None
            if "no such object" not in str(found):
                raise found from None
        under = _listed(s3, S3Uri(uri.bucket, uri.key + "/"), named=uri.text)
        if not under:
            raise TrainerInputError(f"{uri.text}: no such object, and no objects under {uri.text}/; check the key")
        return under
    listed = _listed(s3, uri)
    if not listed:
        raise TrainerInputError(f"{uri.text}: no objects under this prefix; check the bucket and the prefix")
    return listed


def _listed(s3: Any, uri: S3Uri, named: str | None = None) -> list[S3Object]:
    """The objects under a prefix; an error names `named` (the URI as the job gave it), else the prefix."""
    found: list[S3Object] = []
    try:
        for page in s3.get_paginator("list_objects_v2").paginate(Bucket=uri.bucket, Prefix=uri.key):
            found += [
                from_head(item, item["Key"]) for item in page.get("Contents", []) if not item["Key"].endswith("/")
            ]
    except retried_errors() as exc:
        raise explain(named or uri.text, exc) from None
    return sorted(found, key=lambda o: o.key)


def download(s3: Any, bucket: str, obj: S3Object, dest: Path) -> None:
    """One object to `dest` with boto3's transfer manager (multipart ranged GETs, concurrent; s3transfer pins
    the ETag with If-Match across the parts), its exact version where the bucket keeps versions."""
    from boto3.s3.transfer import TransferConfig

    extra = {"VersionId": obj.version_id} if obj.version_id else None
    uri = f"s3://{bucket}/{obj.key}"
    try:
        s3.download_file(bucket, obj.key, str(dest), ExtraArgs=extra, Config=TransferConfig(max_concurrency=8))
    except retried_errors() as exc:
        raise explain(uri, exc) from None


class _Described:
    """Gives s3transfer the object's size and ETag as the listing named them (its `on_queued` hook, the
    s3transfer.subscribers.BaseSubscriber interface): it then skips its own HEAD (DownloadSubmissionTask,
    s3transfer/download.py), and its If-Match on every part pins the listed version, the one the entry is named by."""

    def __init__(self, obj: S3Object) -> None:
        self.obj = obj

    def on_queued(self, future: Any, **_kwargs: Any) -> None:
        future.meta.provide_transfer_size(self.obj.size)
        future.meta.provide_object_etag(f'"{self.obj.etag}"')

    def on_progress(self, **_kwargs: Any) -> None:
        pass

    def on_done(self, **_kwargs: Any) -> None:
        pass


def download_digests(s3: Any, bucket: str, obj: S3Object, dest: Path, wanted: set[str]) -> Fetched:
    """`download` of the listed version into `dest`, with the CRC32 of each part and S3's `wanted` checks
    (`needed`) of the bytes as they were written. An object replaced since it was listed fails with
    TransferFailed.

    `multipart_threshold=1` sends every object down s3transfer's ranged path, the one that sends If-Match (its
    single-GET path for objects under 8 MiB sends none, and IfMatch is not among its ALLOWED_DOWNLOAD_ARGS):
    one GET as before for a small object, none for an empty one."""
    from boto3.s3.transfer import TransferConfig, create_transfer_manager
    from s3transfer.exceptions import S3DownloadFailedError

    extra = {"VersionId": obj.version_id} if obj.version_id else {}
    uri = f"s3://{bucket}/{obj.key}"
    config = TransferConfig(io_chunksize=IO_CHUNK, multipart_threshold=1, multipart_chunksize=PART)
    try:
        with dest.open("wb") as fh, create_transfer_manager(s3, config) as manager:
            writer = PartWriter(fh, dest, obj.size, wanted)
            try:
                manager.download(bucket, obj.key, writer, extra_args=extra, subscribers=[_Described(obj)]).result()
            finally:
                writer.close()
            return writer.result()
    except S3DownloadFailedError:  # s3transfer's word for a 412 on its If-Match (GetObjectTask, download.py)
        raise TransferFailed(f"{uri}: the object was replaced (PreconditionFailed) since it was listed; "
                             "run again to stage the new version") from None  # fmt: skip
    except retried_errors() as exc:
        raise explain(uri, exc) from None

"""The AWS calls both the engine and the SDK 3.x bridge make: one call with botocore's errors in words, the
upload of the code tarball to where the request's sagemaker_submit_directory points, the checkpoint prefix's
upload for `--resume-from` (its download is targets/s3_checkpoints.py), and a model archive's download. I/O
(boto3, lazily)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ...errors import EngineError, JobError
from ...spec.job_spec import JobSpec
from .request import code_uri, section, source_program

if TYPE_CHECKING:
    import boto3


def aws_call(what: str, fn: Callable[..., Any], **kwargs: Any) -> Any:
    """Run one AWS call; turn botocore's errors into EngineError with what was being done."""
    from botocore.exceptions import BotoCoreError, ClientError, NoCredentialsError, NoRegionError

    try:
        return fn(**kwargs)
    except NoCredentialsError as exc:
        raise EngineError(f"{what}: no AWS credentials", hint="aws configure, or set AWS_PROFILE") from exc
    except NoRegionError as exc:
        raise EngineError(f"{what}: no AWS region", hint="set sagemaker.region or AWS_DEFAULT_REGION") from exc
    except ClientError as exc:
        err = exc.response.get("Error", {})
        code = err.get("Code", "?")
        raise EngineError(f"{what}: AWS said {code}: {err.get('Message', exc)}") from exc
    except BotoCoreError as exc:
        raise EngineError(f"{what}: {exc}") from exc


def not_found(exc: EngineError) -> bool:
    """Whether AWS said the named resource does not exist: DescribeTrainingJob answers a ValidationException
    ("Requested resource not found."; moto: "Could not find training job ..."), not a ResourceNotFound."""
    from botocore.exceptions import ClientError

    cause = exc.__cause__
    if not isinstance(cause, ClientError):
        return False
    err = cause.response.get("Error", {})
    words = str(err.get("Message", "")).lower()
    return err.get("Code") == "ValidationException" and ("not found" in words or "could not find" in words)


def _parse_s3(uri: str) -> tuple[str, str]:
    bucket, _, key = uri.removeprefix("s3://").partition("/")
    return bucket, key


def upload_source(job: JobSpec, name: str, boto_session: boto3.Session) -> str | None:
    """Pack sagemaker.source_dir and put it where the request's `code` channel points. Returns that URI."""
    import io

    from ...submit.bundle import UploadProgress, prepared

    sec = section(job)
    uri = code_uri(job, name)
    if sec.source_dir is None or uri is None:
        return None
    script = None if job.launch == "per_node" or job.function else source_program(job)[0]  # the command as written
    code = prepared(job)  # the one bundle render hashed: job.code, or sagemaker.source_dir read as code
    assert code is not None
    if script is not None and script not in dict(code.files):
        raise JobError([f"sagemaker.entry_point: {script!r} is not a file in the bundle of {str(code.source)!r}"])
    bucket, key = _parse_s3(uri)
    s3 = boto_session.client("s3")
    with UploadProgress(code.size, f"code -> {uri}") as progress:
        aws_call(
            f"upload {uri}",
            s3.upload_fileobj,
            Fileobj=io.BytesIO(code.data),
            Bucket=bucket,
            Key=key,
            ExtraArgs={"ContentType": "application/gzip"},
            Callback=progress,
        )
    return uri


def upload_checkpoint(job: JobSpec, files: Path, subdir: str, boto_session: boto3.Session | None = None) -> str:
    """`--resume-from`: put the folder `files` under the job's checkpoint prefix (+ subdir); SageMaker
    syncs that prefix into /opt/ml/checkpoints before the trainer starts (CheckpointConfig)."""
    import boto3

    from ..transfer import ResumeError
    from .request import checkpoint_uri

    uri = checkpoint_uri(job, None)  # schedule_resumed gave the job a prefix of its own
    if uri is None:
        raise ResumeError("--resume-from: the job has no checkpoint S3 prefix; set sagemaker.checkpoint_s3_uri")
    session = boto_session or boto3.Session(region_name=section(job).region)
    bucket, prefix = _parse_s3(uri)
    dest = f"{prefix.rstrip('/')}/{subdir}" if subdir else prefix.rstrip("/")
    s3 = session.client("s3")
    held = aws_call(f"list {uri}", s3.list_objects_v2, Bucket=bucket, Prefix=prefix, MaxKeys=1)
    if held.get("KeyCount"):
        raise ResumeError(
            f"--resume-from: the job's checkpoint prefix {uri} already holds checkpoints (the run would take the "
            "newest of them); set sagemaker.checkpoint_s3_uri to an empty prefix"
        )
    for path in sorted(p for p in files.rglob("*") if p.is_file()):
        key = f"{dest}/{path.relative_to(files).as_posix()}".lstrip("/")
        aws_call(f"upload s3://{bucket}/{key}", s3.upload_file, Filename=str(path), Bucket=bucket, Key=key)
    return f"s3://{bucket}/{dest.lstrip('/')}/"


def download_archive(uri: str, dest: Path, boto_session: boto3.Session) -> None:
    """A training job's `model.tar.gz` (its /opt/ml/model, the trainer's output folder) unpacked into `dest`;
    tarfile's "data" filter refuses links and paths that would leave it."""
    import tarfile
    import tempfile

    bucket, key = _parse_s3(uri)
    dest.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=dest.parent) as tmp:
        archive = Path(tmp) / "model.tar.gz"
        s3 = boto_session.client("s3")
        aws_call(f"download {uri}", s3.download_file, Bucket=bucket, Key=key, Filename=str(archive))
        with tarfile.open(archive) as tar:
            tar.extractall(dest, filter="data")

"""Job -> SageMaker CreateTrainingJob request. Pure: no I/O, no boto3, no clock (the caller passes `now`).

The request is what `boto3.client("sagemaker").create_training_job(**request)` takes, field for field,
so `trainctl render --target sagemaker` shows exactly what would be sent.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping
from datetime import datetime, timezone
from typing import Any

from ...errors import JobError
from ...job import Job
from ..program import trainer_settings
from .instances import lookup
from .section import SageMakerSection

ML = "/opt/ml"
DATA_DIR = f"{ML}/input/data"
CHECKPOINT_DIR = f"{ML}/checkpoints"
MODEL_DIR = f"{ML}/model"
CODE_CHANNEL = "code"
CODE_TARBALL = "sourcedir.tar.gz"
CONTAINER_ENTRYPOINT = ["train"]
"""The image's ENTRYPOINT is `trainer-launch`, which does not accept SageMaker's `train` argument;
`ContainerEntrypoint: ["train"]` runs the image's `train` script (`exec trainer-launch`) instead."""

DEFAULT_MAX_RUNTIME_S = 86400  # SageMaker's own default when StoppingCondition gives none
MAX_RUNTIME_LIMIT_S = 28 * 86400
MAX_RETRIES = 30
SECRET_ENV_PREFIX = "TRAINCTL_SECRET_"

# The keys SageMaker SDK 2.x (sagemaker.pytorch.PyTorch.hyperparameters) emits for each distribution.
TORCH_DISTRIBUTED_KEY = "sagemaker_torch_distributed_enabled"
SMDDP_KEY = "sagemaker_distributed_dataparallel_enabled"
SMDDP_MPI_OPTIONS_KEY = "sagemaker_distributed_dataparallel_custom_mpi_options"
INSTANCE_TYPE_KEY = "sagemaker_instance_type"
PROGRAM_KEY = "sagemaker_program"
SUBMIT_DIR_KEY = "sagemaker_submit_directory"
COMMAND_KEY = "trainctl_command"

_NAME_PATTERN = re.compile(r"^[a-zA-Z0-9](-*[a-zA-Z0-9]){0,62}$")
_PYTHONS = ("python", "python3")


# ---- names ----


def job_hash(job: Job) -> str:
    """8 hex characters that change whenever anything in the job changes."""
    text = json.dumps(job.model_dump(mode="json"), sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:8]


def timestamp(now: datetime) -> str:
    """`20261121-120000` in UTC (naive datetimes are taken as UTC)."""
    if now.tzinfo is not None:
        now = now.astimezone(timezone.utc)
    return now.strftime("%Y%m%d-%H%M%S")


def training_job_name(job: Job, now: datetime | None = None) -> str:
    """`<job name>-<UTC timestamp>` when `now` is given (submit), else `<job name>-<job hash>` (render).

    The job name is cut so the whole fits SageMaker's 63 characters and pattern.
    """
    suffix = timestamp(now) if now is not None else job_hash(job)
    base = job.name[: 63 - len(suffix) - 1].rstrip("-")
    name = f"{base}-{suffix}"
    assert _NAME_PATTERN.match(name), name
    return name


# ---- small helpers ----


def s3_join(prefix: str, *parts: str) -> str:
    """`s3://b/p/` + `a`, `b` -> `s3://b/p/a/b` (no doubled slashes)."""
    return "/".join([prefix.rstrip("/"), *(p.strip("/") for p in parts)])


def encode_hyperparameters(values: Mapping[str, Any]) -> dict[str, str]:
    """SageMaker's PyTorch-container form: every value JSON-encoded, as the SageMaker SDK does it."""
    return {str(key): json.dumps(value) for key, value in values.items()}


def _typed(text: str) -> Any:
    """A trainer flag text back to its JSON value (`"32"` -> 32, `"true"` -> True); plain strings stay."""
    try:
        return json.loads(text)
    except ValueError:
        return text


def section(job: Job) -> SageMakerSection:
    sec = job.section("sagemaker")
    assert isinstance(sec, SageMakerSection)
    return sec


def output_uri(job: Job) -> str | None:
    return section(job).output_s3_uri or job.output_dir


def checkpoint_uri(job: Job) -> str | None:
    """Explicit checkpoint prefix, else one per job name (not per run) under the output prefix."""
    sec = section(job)
    explicit = sec.checkpoint_s3_uri or job.checkpoint.dir
    if explicit:
        return explicit
    out = output_uri(job)
    return s3_join(out, job.name, "checkpoints") + "/" if out else None


def code_uri(job: Job, name: str) -> str | None:
    """Where the source tarball of this training job goes (the SageMaker SDK's `<job>/source/` layout)."""
    sec = section(job)
    prefix = sec.code_s3_prefix or output_uri(job)
    if sec.source_dir is None or prefix is None:
        return None
    return s3_join(prefix, name, "source", CODE_TARBALL)


def source_program(job: Job) -> tuple[str, dict[str, str]]:
    """For a command job with source_dir: (script, its `--key value` args as hyperparameters).

    The launcher runs `python SCRIPT --key value ...` from the unpacked code (docs/contracts.md section 1),
    so the command must have that shape. Raises JobError naming `command` otherwise.
    """
    sec = section(job)
    cmd = job.command or []
    problems: list[str] = []
    if len(cmd) < 2 or cmd[0] not in _PYTHONS:
        raise JobError(
            [f"command: with sagemaker.source_dir the command must be [python, SCRIPT, --key, value, ...], got {cmd}"]
        )
    script, rest = cmd[1], cmd[2:]
    if sec.entry_point is not None and sec.entry_point != script:
        problems.append(f"sagemaker.entry_point: {sec.entry_point!r} differs from the command's script {script!r}")
    if script.startswith("/") or ".." in script.split("/"):
        problems.append(f"command: script {script!r} must be a relative path inside sagemaker.source_dir")
    args: dict[str, str] = {}
    i = 0
    while i < len(rest):
        flag = rest[i]
        key, eq, value = flag.partition("=")
        if not key.startswith("--") or len(key) < 3:
            problems.append(f"command: argument {flag!r}: SageMaker passes only --key value pairs to the script")
            break
        if not eq:
            if i + 1 >= len(rest) or rest[i + 1].startswith("--"):
                problems.append(f"command: flag {flag!r} has no value (SageMaker hyperparameters are key=value)")
                break
            value = rest[i + 1]
            i += 1
        name = key[2:]
        if "_" in name:
            problems.append(
                f"command: flag {key!r}: the launcher turns '_' into '-' in hyperparameter names; "
                f"write --{name.replace('_', '-')}"
            )
        args[name] = value
        i += 1
    if problems:
        raise JobError(problems)
    return script, args


# ---- the request ----


def data_paths(job: Job) -> dict[str, str]:
    return {name: f"{DATA_DIR}/{name}" for name in job.data}


def distribution_hyperparameters(job: Job) -> dict[str, Any]:
    """The keys SageMaker SDK 2.x's PyTorch estimator adds for the job's distribution."""
    sec = section(job)
    if sec.distribution == "pytorchddp":
        # SDK 2.x rewrites {"pytorchddp": ...} to {"smdistributed": {"dataparallel": ...}}.
        return {SMDDP_KEY: True, INSTANCE_TYPE_KEY: sec.instance_type, SMDDP_MPI_OPTIONS_KEY: ""}
    return {TORCH_DISTRIBUTED_KEY: True, INSTANCE_TYPE_KEY: sec.instance_type}


def program_hyperparameters(job: Job, name: str) -> dict[str, Any]:
    """What the launcher needs to know what to run (docs/contracts.md section 1), as plain values."""
    if job.trainer is not None:
        settings = trainer_settings(
            job, data_paths=data_paths(job), checkpoint_dir=CHECKPOINT_DIR, output_dir=MODEL_DIR
        )
        return {key: _typed(value) for key, value in settings.items()}
    assert job.command is not None
    if section(job).source_dir is None:
        return {COMMAND_KEY: list(job.command)}
    script, args = source_program(job)
    return {**args, PROGRAM_KEY: script, SUBMIT_DIR_KEY: code_uri(job, name)}


def hyperparameters(job: Job, name: str) -> dict[str, str]:
    return encode_hyperparameters({**program_hyperparameters(job, name), **distribution_hyperparameters(job)})


def environment(job: Job) -> dict[str, str]:
    """The job's env plus one `TRAINCTL_SECRET_<ENV>=<secret id>[#key]` per secret: names only, never values."""
    env = dict(job.env)
    for secret in job.secrets:
        env[f"{SECRET_ENV_PREFIX}{secret.env}"] = secret.name + (f"#{secret.key}" if secret.key else "")
    return dict(sorted(env.items()))


def _s3_channel(name: str, uri: str) -> dict[str, Any]:
    return {
        "ChannelName": name,
        "DataSource": {
            "S3DataSource": {"S3DataType": "S3Prefix", "S3Uri": uri, "S3DataDistributionType": "FullyReplicated"}
        },
    }


def container_arguments(job: Job) -> list[str]:
    """The launcher's own options (no PROGRAM: on SageMaker it reads the program from the hyperparameters)."""
    res = job.resources
    return ["--nproc-per-node", str(res.nprocs), "--max-restarts", str(res.max_restarts)]


def build_request(job: Job, name: str) -> dict[str, Any]:
    """The CreateTrainingJob request for an already validated job."""
    sec = section(job)
    assert sec.instance_type is not None and sec.role_arn is not None
    out = output_uri(job)
    assert out is not None
    runtime = job.max_runtime_seconds or DEFAULT_MAX_RUNTIME_S
    channels = [_s3_channel(n, uri) for n, uri in sorted(job.data.items())]
    code = code_uri(job, name)
    if code is not None:
        channels.append(_s3_channel(CODE_CHANNEL, code))
    stopping: dict[str, int] = {"MaxRuntimeInSeconds": runtime}
    if job.spot:
        stopping["MaxWaitTimeInSeconds"] = sec.max_wait_seconds or runtime
    request: dict[str, Any] = {
        "TrainingJobName": name,
        "AlgorithmSpecification": {
            "TrainingImage": job.image,
            "TrainingInputMode": sec.input_mode,
            "ContainerEntrypoint": list(CONTAINER_ENTRYPOINT),
            "ContainerArguments": container_arguments(job),
        },
        "RoleArn": sec.role_arn,
        "HyperParameters": hyperparameters(job, name),
        "ResourceConfig": {
            "InstanceType": sec.instance_type,
            "InstanceCount": job.resources.nodes,
            "VolumeSizeInGB": sec.volume_size_gb,
        },
        "OutputDataConfig": {"S3OutputPath": out},
        "CheckpointConfig": {"S3Uri": checkpoint_uri(job), "LocalPath": CHECKPOINT_DIR},
        "StoppingCondition": stopping,
        "EnableManagedSpotTraining": job.spot,
        "Environment": environment(job),
        "Tags": [{"Key": k, "Value": v} for k, v in sorted({**sec.tags, "trainctl:job": job.name}.items())],
    }
    if channels:
        request["InputDataConfig"] = channels
    if job.retries:
        request["RetryStrategy"] = {"MaximumRetryAttempts": job.retries}
    if sec.subnets:
        request["VpcConfig"] = {"SecurityGroupIds": list(sec.security_group_ids), "Subnets": list(sec.subnets)}
    return request


def cost_note(job: Job) -> str:
    """`cost: 2 x ml.g5.12xlarge at ~$7.09/h = ~$14.18/h on demand; at most ~$28.36 for max_runtime 2h`."""
    sec = section(job)
    inst = lookup(sec.instance_type or "")
    if inst is None:
        return "cost: unknown instance type"
    nodes = job.resources.nodes
    hourly = nodes * inst.usd_per_hour
    runtime = job.max_runtime_seconds or DEFAULT_MAX_RUNTIME_S
    spot = " (managed spot bills less, by the spot discount)" if job.spot else ""
    return (
        f"cost: {nodes} x {inst.name} at ~${inst.usd_per_hour:.2f}/h = ~${hourly:.2f}/h on demand{spot}; "
        f"at most ~${hourly * runtime / 3600:.2f} for MaxRuntimeInSeconds={runtime} "
        "(approximate us-east-1 list prices)"
    )


def notes(job: Job) -> tuple[str, ...]:
    sec = section(job)
    inst = lookup(sec.instance_type or "")
    lines = [cost_note(job)]
    if inst is not None:
        gpu = f"{inst.gpus} x {inst.gpu_model} GPU" if inst.gpus else "no GPU"
        lines.append(f"instance: {inst.name}: {gpu}, {inst.vcpus} vCPUs, {inst.memory_gib} GiB")
    lines.append("TrainingJobName here is <name>-<job hash>; submit uses <name>-<UTC timestamp> (one name per run)")
    lines.append(
        'AlgorithmSpecification: ContainerEntrypoint ["train"] runs the image\'s train script (trainer-launch) '
        "with ContainerArguments (processes per node, restarts); the launcher reads the program from HyperParameters"
    )
    if sec.source_dir is not None:
        lines.append(f"submit packs {sec.source_dir} into {CODE_TARBALL} and uploads it to the `code` channel's URI")
    if job.secrets:
        lines.append(
            f"secrets: {SECRET_ENV_PREFIX}<ENV> carries the Secrets Manager id (and #key); the value is read "
            "at run time with the execution role, never written into the request"
        )
    if job.spot and sec.max_wait_seconds is None:
        lines.append("spot: MaxWaitTimeInSeconds defaults to MaxRuntimeInSeconds (no time spent waiting for capacity)")
    return tuple(lines)


def utc_now() -> datetime:
    return datetime.now(timezone.utc)

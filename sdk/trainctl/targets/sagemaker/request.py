"""Job -> SageMaker CreateTrainingJob request. Pure: no I/O, no boto3, no clock (the caller passes `now`).

The request is what `boto3.client("sagemaker").create_training_job(**request)` takes, field for field,
so `trainctl render --target sagemaker` shows exactly what would be sent.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Mapping
from datetime import datetime, timezone
from typing import Any

from ...errors import JobError
from ...runs.progress import METRIC_PATTERNS
from ...runs.provenance import provenance_env, spec_sha256
from ...spec.job_spec import JobSpec
from ...submit.bundle import prepared_if_present
from ..program import launcher_options, trainer_settings
from . import container as ct
from . import groups
from .instances import lookup
from .limits import ENVIRONMENT_VALUE_MAX, MAX_ENVIRONMENT
from .section import SageMakerSection

ML = "/opt/ml"
DATA_DIR = f"{ML}/input/data"
CHECKPOINT_DIR = f"{ML}/checkpoints"
MODEL_DIR = f"{ML}/model"
CODE_CHANNEL = "code"
CODE_TARBALL = "sourcedir.tar.gz"
CODE_CHANNEL_TARBALL = f"{DATA_DIR}/{CODE_CHANNEL}/{CODE_TARBALL}"
TENSORBOARD_DIR = f"{ML}/output/tensorboard"  # SageMaker's default TensorBoardOutputConfig.LocalPath
CONTAINER_ENTRYPOINT = ["train"]
"""The image's ENTRYPOINT is `trainer-launch`, which does not accept SageMaker's `train` argument;
`ContainerEntrypoint: ["train"]` runs the image's `train` script (`exec trainer-launch`) instead."""

DEFAULT_MAX_RUNTIME_S = 86400  # SageMaker's own default when StoppingCondition gives none
MAX_RUNTIME_LIMIT_S = 28 * 86400
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


def job_hash(job: JobSpec) -> str:
    """8 hex characters of the job's spec sha256 (provenance.spec_sha256: they change whenever the job as
    written changes, and not when trainctl adds a field with a default)."""
    return spec_sha256(job)[:8]


def timestamp(now: datetime) -> str:
    """`20261121-120000` in UTC (naive datetimes are taken as UTC)."""
    if now.tzinfo is not None:
        now = now.astimezone(timezone.utc)
    return now.strftime("%Y%m%d-%H%M%S")


def training_job_name(job: JobSpec, now: datetime | None = None, token: str = "") -> str:
    """`<job name>-<UTC timestamp>-<token>` when `now` is given (submit), else `<job name>-<job hash>` (render).

    `token` (a few random hex digits from the engine) keeps two submits of the same job in the same
    second apart. The job name is cut so the whole fits SageMaker's 63 characters and pattern.
    """
    suffix = job_hash(job) if now is None else "-".join(p for p in (timestamp(now), token) if p)
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


def section(job: JobSpec) -> SageMakerSection:
    """The job's sagemaker section; a job-level `code:` (or a function's payload) is its source_dir (the S3 `code`
    channel, as before)."""
    sec = job.section_as("sagemaker", SageMakerSection)
    if sec.source_dir is None and (job.code is not None or job.function is not None):  # a function: its bundle
        return sec.model_copy(update={"source_dir": job.code.dir if job.code else f"<{job.function.name}>"})  # type: ignore[union-attr]
    return sec


def output_uri(job: JobSpec) -> str | None:
    return section(job).output_s3_uri or job.output_dir


def checkpoint_uri(job: JobSpec, name: str | None) -> str | None:
    """The explicit checkpoint prefix (the user's: every training job that names it shares it), else one per
    training job `name` under the output prefix, `<output>/<training job name>/checkpoints/`, beside the
    job's own output: a new run starts empty, and SageMaker's retries of that training job resume from it."""
    sec = section(job)
    explicit = sec.checkpoint_s3_uri or job.checkpoint.dir
    if explicit:
        # SageMaker syncs S3Uri as a key prefix: without the slash s3://b/ckpt/run1 also takes run10's files
        return explicit.rstrip("/") + "/"
    out = output_uri(job)
    return s3_join(out, name, "checkpoints") + "/" if out and name else None


def code_prefix(job: JobSpec) -> str | None:
    """The S3 prefix the code tarballs go under (the SageMaker SDK's `code_location`)."""
    return section(job).code_s3_prefix or output_uri(job)


def tarball_uri(job: JobSpec, name: str) -> str | None:
    """Where a code tarball of training job `name` goes: the SageMaker SDK's `<prefix>/<job>/source/` layout."""
    prefix = code_prefix(job)
    return s3_join(prefix, name, "source", CODE_TARBALL) if prefix is not None else None


def code_uri(job: JobSpec, name: str) -> str | None:
    """Where the job's source tarball goes (None without sagemaker.source_dir or `code:`)."""
    return tarball_uri(job, name) if section(job).source_dir is not None else None


def submit_directory(job: JobSpec, name: str) -> str | None:
    """`sagemaker_submit_directory`: the tarball's S3 URI; under network isolation, where a container reaches no
    S3, its copy in the `code` channel, as SageMaker SDK 2.x writes it (sagemaker/estimator.py
    Framework._prepare_for_training, CONTAINER_CODE_CHANNEL_SOURCEDIR_PATH). The toolkit takes either
    (sagemaker_training/files.py download_and_extract); trainctl's launcher reads the channel."""
    return CODE_CHANNEL_TARBALL if section(job).network_isolation else code_uri(job, name)


def source_program(job: JobSpec) -> tuple[str, dict[str, str]]:
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
        args[key[2:]] = value  # the script gets `--key value` back, keys as written, sorted by key
        i += 1
    if problems:
        raise JobError(problems)
    return script, args


# ---- the request ----


def data_paths(job: JobSpec) -> dict[str, str]:
    return {name: f"{DATA_DIR}/{name}" for name in job.data}


def distribution_hyperparameters(job: JobSpec) -> dict[str, Any]:
    """The keys SageMaker SDK 2.x's PyTorch estimator adds for the job's distribution, and the training group."""
    sec = section(job)
    itype = groups.instance_type(job)
    if sec.distribution == "pytorchddp":
        # SDK 2.x rewrites {"pytorchddp": ...} to {"smdistributed": {"dataparallel": ...}}.
        out: dict[str, Any] = {SMDDP_KEY: True, INSTANCE_TYPE_KEY: itype, SMDDP_MPI_OPTIONS_KEY: ""}
    else:
        out = {TORCH_DISTRIBUTED_KEY: True, INSTANCE_TYPE_KEY: itype}
    dist_groups = groups.distribution_groups(job)
    if dist_groups is not None:
        out[ct.DISTRIBUTION_GROUPS_KEY] = dist_groups
    return out


def program_hyperparameters(job: JobSpec, name: str) -> dict[str, Any]:
    """What the launcher needs to know what to run (docs/contracts.md section 1), as plain values."""
    if job.trainer is not None:
        settings = trainer_settings(
            job, data_paths=data_paths(job), checkpoint_dir=CHECKPOINT_DIR, output_dir=MODEL_DIR
        )
        return {key: _typed(value) for key, value in settings.items()}
    assert job.command is not None
    if section(job).source_dir is None:
        return {COMMAND_KEY: list(job.command)}
    if job.launch == "per_node" or job.function is not None:  # the argv as written, run from the unpacked code
        return {COMMAND_KEY: list(job.command), SUBMIT_DIR_KEY: submit_directory(job, name)}
    script, args = source_program(job)
    out: dict[str, Any] = {**args, PROGRAM_KEY: script, SUBMIT_DIR_KEY: submit_directory(job, name)}
    if ct.container(job) == "toolkit":
        out[ct.REGION_KEY] = section(job).region or ct.image_region(job.image)
        out[ct.LOG_LEVEL_KEY] = section(job).container_log_level
        out[ct.JOB_NAME_KEY] = name
        inst = lookup(groups.instance_type(job) or "")
        if inst is not None and job.resources.nprocs != max(inst.gpus, 1):
            out[ct.PROCESSES_PER_HOST_KEY] = job.resources.nprocs  # the toolkit's default is one per GPU
    return out


def hyperparameters(job: JobSpec, name: str) -> dict[str, str]:
    return encode_hyperparameters({**program_hyperparameters(job, name), **distribution_hyperparameters(job)})


def environment(job: JobSpec) -> dict[str, str]:
    """The job's env plus one `TRAINCTL_SECRET_<ENV>=<secret id>[#key]` per secret: names only, never values."""
    env = dict(job.process_env)
    for secret in job.secrets:
        env[f"{SECRET_ENV_PREFIX}{secret.env}"] = secret.name + (f"#{secret.key}" if secret.key else "")
    code = prepared_if_present(job) if section(job).source_dir is not None else None
    if code is not None:  # the launcher checks the code channel's tarball against it before unpacking
        env["TRAINER_CODE_SHA256"] = code.sha256
    env.update(provenance_entry(job, code.sha256 if code else None, len(env)))
    return dict(sorted(env.items()))


def provenance_entry(job: JobSpec, code_sha256: str | None, taken: int) -> dict[str, str]:
    """TRAINCTL_PROVENANCE (what ran, for summary.json) where it fits: never at the cost of a variable of the
    job's own (TrainingEnvironmentMap holds at most 100) nor over the 512-character value limit (an image
    reference with a digest can be long); `notes` says when it was left out."""
    entry = provenance_env(job, code_sha256)
    fits = taken < MAX_ENVIRONMENT and all(len(v) <= ENVIRONMENT_VALUE_MAX for v in entry.values())
    return entry if fits else {}


def s3_channel(job: JobSpec, name: str, uri: str) -> dict[str, Any]:
    """One input channel; with instance groups, the groups that download it (every group for `code`)."""
    source: dict[str, Any] = {"S3DataType": "S3Prefix", "S3Uri": uri, "S3DataDistributionType": "FullyReplicated"}
    group_names = groups.channel_group_names(job, name, shared=name == CODE_CHANNEL)
    if group_names is not None:
        source["InstanceGroupNames"] = group_names
    return {"ChannelName": name, "DataSource": {"S3DataSource": source}}


def container_arguments(job: JobSpec) -> list[str]:
    """The launcher's own options (no PROGRAM: on SageMaker it reads the program from the hyperparameters)."""
    return launcher_options(job)


def with_instance_defaults(job: JobSpec) -> JobSpec:
    """gpus_per_node left unset -> the instance's GPUs (ml.p4d.24xlarge: 8 processes per node), so none sit idle."""
    res = job.resources
    inst = lookup(groups.instance_type(job) or "")
    if inst is None or inst.gpus == 0 or "gpus_per_node" in res.model_fields_set:
        return job
    return job.model_copy(update={"resources": res.model_copy(update={"gpus_per_node": inst.gpus})})


def channel_names(job: JobSpec) -> list[str]:
    """Every input channel: the data inputs, and `code` where trainctl's launcher reads the tarball from it
    (and under network isolation, where the toolkit cannot download it either: submit_directory)."""
    names = sorted(job.data)
    sec = section(job)
    if sec.source_dir is not None and (ct.container(job) == "trainctl" or sec.network_isolation):
        names.append(CODE_CHANNEL)
    return names


def _channels(job: JobSpec, name: str, local: bool) -> list[dict[str, Any]]:
    found = []
    for channel in channel_names(job):
        uri = job.data[channel] if channel in job.data else code_uri(job, name)
        assert uri is not None
        on_disk = local and channel in job.data and not uri.startswith("s3://")
        found.append(file_channel(job, channel, uri) if on_disk else s3_channel(job, channel, uri))
    return found


def metric_definitions() -> list[dict[str, str]]:
    """Regexes over the job's log that SageMaker turns into metrics (console, CloudWatch, DescribeTrainingJob's
    FinalMetricDataList): the progress line of the trainer, or of a `command:` program that prints it
    (progress.py; docs/contracts.md "Progress"), and the trainer's validation line."""
    return [{"Name": name, "Regex": regex} for name, regex in METRIC_PATTERNS.items()]


def file_channel(job: JobSpec, name: str, uri: str) -> dict[str, Any]:
    """A local-mode channel from a path here (relative to the job file) or file://, as the SDK's local mode has one
    (sagemaker/local/local_session.py `file_input`; data.py `get_data_source_instance` reads file:// so)."""
    path = os.path.join(str(job.base_dir or os.getcwd()), uri.removeprefix("file://"))  # an absolute one stays
    source = {"FileDataDistributionType": "FullyReplicated", "FileUri": f"file://{os.path.normpath(path)}"}
    return {"ChannelName": name, "DataSource": {"FileDataSource": source}}


def algorithm(job: JobSpec) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "TrainingImage": job.image, "TrainingInputMode": section(job).input_mode,
        "MetricDefinitions": metric_definitions(),
    }  # fmt: skip
    if ct.container(job) == "trainctl":
        spec["ContainerEntrypoint"] = list(CONTAINER_ENTRYPOINT)
        spec["ContainerArguments"] = container_arguments(job)
    return spec


def tensorboard_local_path(job: JobSpec) -> str:
    """trainctl's trainer writes its events under the output dir (trainer/training/metrics.py); else SageMaker's default."""
    return f"{MODEL_DIR}/tensorboard" if job.trainer is not None else TENSORBOARD_DIR


def _options(job: JobSpec, request: dict[str, Any]) -> None:
    """Warm pools, KMS keys, isolation, encryption, pending time and TensorBoard, where the job asks."""
    sec = section(job)
    if sec.keep_alive_seconds is not None:
        request["ResourceConfig"]["KeepAlivePeriodInSeconds"] = sec.keep_alive_seconds
    if sec.volume_kms_key_id:
        request["ResourceConfig"]["VolumeKmsKeyId"] = sec.volume_kms_key_id
    if sec.output_kms_key_id:
        request["OutputDataConfig"]["KmsKeyId"] = sec.output_kms_key_id
    if sec.network_isolation:
        request["EnableNetworkIsolation"] = True
    if sec.inter_container_encryption:
        request["EnableInterContainerTrafficEncryption"] = True
    if sec.max_pending_seconds is not None:
        request["StoppingCondition"]["MaxPendingTimeInSeconds"] = sec.max_pending_seconds
    if sec.tensorboard_s3_uri:
        request["TensorBoardOutputConfig"] = {
            "S3OutputPath": sec.tensorboard_s3_uri,
            "LocalPath": tensorboard_local_path(job),
        }


def build_request(job: JobSpec, name: str, local: bool = False) -> dict[str, Any]:
    """The CreateTrainingJob request for an already validated job; `local`: for local mode (-O local=true),
    whose data channels may be paths here."""
    job = with_instance_defaults(job)
    sec = section(job)
    assert sec.role_arn is not None
    out = output_uri(job)
    assert out is not None
    runtime = job.max_runtime_seconds or DEFAULT_MAX_RUNTIME_S
    channels = _channels(job, name, local)
    stopping: dict[str, int] = {"MaxRuntimeInSeconds": runtime}
    if job.spot:
        stopping["MaxWaitTimeInSeconds"] = sec.max_wait_seconds or runtime
    request: dict[str, Any] = {
        "TrainingJobName": name,
        "AlgorithmSpecification": algorithm(job),
        "RoleArn": sec.role_arn,
        "HyperParameters": hyperparameters(job, name),
        "ResourceConfig": groups.resource_config(job, sec.volume_size_gb),
        "OutputDataConfig": {"S3OutputPath": out},
        "CheckpointConfig": {"S3Uri": checkpoint_uri(job, name), "LocalPath": CHECKPOINT_DIR},
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
    _options(job, request)
    return request


def utc_now() -> datetime:
    return datetime.now(timezone.utc)

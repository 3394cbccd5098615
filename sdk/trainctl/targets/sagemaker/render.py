"""Job -> SageMaker CreateTrainingJob request -> JSON bytes. Pure: no I/O, no boto3, no clock.

`validate` checks every rule SageMaker would enforce later; `request.build_request` builds the
request that `boto3.client("sagemaker").create_training_job(**request)` takes, field for field, so
`trainctl render --target sagemaker` shows exactly what would be sent.
"""

from __future__ import annotations

import re
from datetime import datetime

from ...errors import JobError, did_you_mean
from ...spec.job_spec import JobSpec
from ..base import Rendered, json_text
from . import container as ct
from . import data_upload, groups, limits
from .instances import INSTANCE_TYPES, InstanceType, lookup
from .notes import notes
from .request import (
    CODE_CHANNEL,
    COMMAND_KEY,
    DEFAULT_MAX_RUNTIME_S,
    MAX_RUNTIME_LIMIT_S,
    build_request,
    channel_names,
    checkpoint_uri,
    code_uri,
    environment,
    hyperparameters,
    output_uri,
    section,
    source_program,
    training_job_name,
    with_instance_defaults,
)

_ROLE_ARN = re.compile(r"^arn:aws[a-z-]*:iam::\d{12}:role/[\w+=,.@/-]{1,512}$")
_S3_URI = re.compile(r"^s3://[a-z0-9][a-z0-9.-]{1,61}[a-z0-9](/.*)?$")
_ECR_IMAGE = re.compile(r"^\d{12}\.dkr\.ecr\.[a-z0-9-]+\.amazonaws\.com(\.cn)?/")
# The smddp library's instance types: SageMaker Python SDK 2.257 sagemaker/fw_utils.py
# SM_DATAPARALLEL_SUPPORTED_INSTANCE_TYPES (less "local_gpu"); tests/sagemaker compares with the installed SDK.
SMDDP_INSTANCE_TYPES = ("ml.p3.16xlarge", "ml.p3dn.24xlarge", "ml.p4d.24xlarge", "ml.p4de.24xlarge")
_REGION = re.compile(r"^[a-z]{2}(-[a-z]+)+-\d$")


def _s3_problem(field: str, value: str | None) -> list[str]:
    if value is None or _S3_URI.match(value):
        return []
    return [f"{field}: got {value!r}; SageMaker needs an s3://bucket/prefix URI here"]


def validate(job: JobSpec, local: bool = False) -> None:
    """Every rule SageMaker would enforce later (or silently get wrong), checked before anything is sent.

    local: for `-O local=true` (containers here), whose image comes from the local store, not from ECR."""
    job = with_instance_defaults(job)
    problems = [
        *_access_problems(job),
        *_instance_problems(job),
        *_container_problems(job, local),
        *_s3_problems(job, local),
        *_service_limit_problems(job),
        *_time_problems(job),
        *_program_problems(job),
    ]
    if problems:
        raise JobError(problems)
    # Checked last: only meaningful once everything else is well formed.
    problems = _hyperparameter_problems(job)
    if problems:
        raise JobError(problems)


def _access_problems(job: JobSpec) -> list[str]:
    """Who the job runs as and where: the role (a full ARN) and the region."""
    sec = section(job)
    problems = [*sec.required_for_submit()]
    if sec.role_arn is not None and not _ROLE_ARN.match(sec.role_arn):
        problems.append(
            f"sagemaker.role_arn: got {sec.role_arn!r}; expected a full IAM role ARN such as "
            "arn:aws:iam::123456789012:role/SageMakerExecution (a bare name would make the SDK call IAM)"
        )
    if sec.region is not None and not _REGION.match(sec.region):
        problems.append(f"sagemaker.region: got {sec.region!r}; expected a region such as us-east-1")
    return problems


def _instance_problems(job: JobSpec) -> list[str]:
    """The instances: a known type (or well-formed groups), and GPUs and processes per node that fit it."""
    sec = section(job)
    res = job.resources
    problems = groups.group_problems(job, channel_names(job))
    if not sec.instance_groups and sec.instance_type is not None and lookup(sec.instance_type) is None:
        problems.append(
            f"sagemaker.instance_type: {sec.instance_type!r} is not a known training instance type"
            f"{did_you_mean(sec.instance_type, INSTANCE_TYPES)}; known: {', '.join(INSTANCE_TYPES)} "
            "(add a row to targets/sagemaker/instances.py for another)"
        )
    inst = _training_instance(job)
    if inst is not None:
        if res.gpus_per_node and inst.gpus == 0:
            problems.append(
                f"resources.gpus_per_node: {res.gpus_per_node} asked, but {inst.name} has no GPU; "
                "pick a GPU type (ml.g5.*, ml.p4d.24xlarge, ...) or set gpus_per_node: 0"
            )
        elif res.gpus_per_node > inst.gpus:
            problems.append(
                f"resources.gpus_per_node: {res.gpus_per_node} asked, but {inst.name} has {inst.gpus} GPU(s)"
            )
        limit, unit = (inst.gpus, "GPU(s)") if inst.gpus else (inst.vcpus, "vCPUs")
        if res.nprocs > limit:
            problems.append(
                f"resources.procs_per_node: {res.nprocs} processes per node do not fit {inst.name} "
                f"({inst.gpus if inst.gpus else inst.vcpus} {unit}); at most {limit}"
            )
    if res.elastic is not None:
        problems.append("resources.elastic: SageMaker training jobs have a fixed instance count; remove elastic")
    return problems


def _training_instance(job: JobSpec) -> InstanceType | None:
    """The instance the training processes run on (the training group's in a heterogeneous cluster), if known."""
    return lookup(groups.instance_type(job) or "")


def _container_problems(job: JobSpec, local: bool) -> list[str]:
    """What the image can run: from ECR, smddp only in AWS's images and instances, files (no Pipe), the toolkit."""
    sec = section(job)
    problems: list[str] = []
    if not local and not _ECR_IMAGE.match(job.image):
        problems.append(
            f"image: got {job.image!r}; SageMaker pulls training images from Amazon ECR only: push the trainer "
            "image to <account>.dkr.ecr.<region>.amazonaws.com/<repo>:<tag> and name that"
        )
    if sec.distribution == "pytorchddp":
        if not ct.AWS_PYTORCH_TRAINING.match(job.image):
            problems.append(
                "sagemaker.distribution: pytorchddp is SageMaker's data-parallel library (smdistributed), which "
                f"only AWS's PyTorch training images (…/pytorch-training:TAG) carry; image {job.image!r} is not one. "
                "Use distribution: torch_distributed (torchrun, the trainer image's way)"
            )
        inst = _training_instance(job)
        if inst is not None and inst.name not in SMDDP_INSTANCE_TYPES:
            problems.append(
                f"sagemaker.distribution: pytorchddp (smddp) runs on {', '.join(SMDDP_INSTANCE_TYPES)} only "
                f"(the SageMaker SDK's list), not {inst.name}; use distribution: torch_distributed"
            )
    if sec.input_mode == "Pipe":
        problems.append(
            "sagemaker.input_mode: Pipe streams each channel through FIFOs named <channel>_<epoch>, but the trainer "
            "and the code channel read files; use File (copied first) or FastFile (streamed, read as files)"
        )
    if ct.container(job) == "toolkit":
        problems += ct.toolkit_problems(job)
    if len(job.image) > limits.IMAGE_MAX:
        problems.append(f"image: {len(job.image)} characters; SageMaker allows at most {limits.IMAGE_MAX}")
    return problems


def _s3_problems(job: JobSpec, local: bool = False) -> list[str]:
    """Every S3 location: an s3:// URI within SageMaker's length, and the output prefix given. Local mode
    (`local`) also takes a data input from a path here or a file:// URI, as the SDK's local mode does."""
    sec = section(job)
    problems: list[str] = []
    for name, uri in job.data.items():
        if "://" not in uri or uri.startswith("file://"):
            continue  # a path here: uploaded at submit (data_upload.py), or read as it is by local mode
        problems += _s3_problem(f"data.{name}", uri)
    if CODE_CHANNEL in job.data and sec.source_dir is not None:
        problems.append("data.code: the channel name 'code' carries sagemaker.source_dir; rename this input")
    problems += _s3_problem("sagemaker.output_s3_uri", sec.output_s3_uri)
    problems += _s3_problem("output_dir", job.output_dir)
    problems += _s3_problem("sagemaker.checkpoint_s3_uri", sec.checkpoint_s3_uri)
    problems += _s3_problem("checkpoint.dir", job.checkpoint.dir)
    problems += _s3_problem("sagemaker.code_s3_prefix", sec.code_s3_prefix)
    problems += _s3_problem("sagemaker.tensorboard_s3_uri", sec.tensorboard_s3_uri)
    for name, uri in job.data.items():
        problems += limits.s3_length_problem(f"data.{name}", uri)
    problems += limits.s3_length_problem("sagemaker.output_s3_uri", output_uri(job))
    problems += limits.s3_length_problem("sagemaker.checkpoint_s3_uri", checkpoint_uri(job, training_job_name(job)))
    problems += limits.s3_length_problem("sagemaker.tensorboard_s3_uri", sec.tensorboard_s3_uri)
    problems += limits.s3_length_problem("sagemaker.code_s3_prefix", code_uri(job, training_job_name(job)))
    if output_uri(job) is None:
        problems.append("sagemaker.output_s3_uri: required to submit to SageMaker (or set output_dir to s3://...)")
    return problems


def _service_limit_problems(job: JobSpec) -> list[str]:
    """SageMaker's counts and forms: channels, tags, VPC, environment, KMS keys, warm pool, pending time, retries."""
    sec = section(job)
    problems = [
        *limits.channel_problems(channel_names(job)),
        *limits.tag_problems(sec.tags, added=1),
        *limits.vpc_problems(sec.subnets, sec.security_group_ids),
        *limits.environment_problems(environment(job)),
        *limits.kms_problems("sagemaker.output_kms_key_id", sec.output_kms_key_id),
        *limits.kms_problems("sagemaker.volume_kms_key_id", sec.volume_kms_key_id),
    ]
    if bool(sec.subnets) != bool(sec.security_group_ids):
        problems.append("sagemaker.subnets / sagemaker.security_group_ids: a VpcConfig needs both, or neither")
    keep = sec.keep_alive_seconds
    if keep is not None and keep > limits.KEEP_ALIVE_MAX_S:
        problems.append(
            f"sagemaker.keep_alive_period: {keep}s; SageMaker keeps warm pools at most {limits.KEEP_ALIVE_MAX_S}s"
        )
    pending = sec.max_pending_seconds
    if pending is not None and not limits.MAX_PENDING_MIN_S <= pending <= limits.MAX_PENDING_MAX_S:
        problems.append(
            f"sagemaker.max_pending_time: {pending}s; SageMaker accepts {limits.MAX_PENDING_MIN_S}s to "
            f"{limits.MAX_PENDING_MAX_S}s"
        )
    if job.retries > limits.MAX_RETRY_ATTEMPTS:
        problems.append(f"retries: {job.retries}; SageMaker's RetryStrategy allows at most {limits.MAX_RETRY_ATTEMPTS}")
    return problems


def _time_problems(job: JobSpec) -> list[str]:
    """The run's time: at most 28 days, and managed spot's max_wait at least the runtime."""
    wait = section(job).max_wait_seconds
    runtime = job.max_runtime_seconds or DEFAULT_MAX_RUNTIME_S
    problems: list[str] = []
    if runtime > MAX_RUNTIME_LIMIT_S:
        problems.append(f"max_runtime: {runtime}s is more than SageMaker's 28 days ({MAX_RUNTIME_LIMIT_S}s)")
    if wait is not None and not job.spot:
        problems.append("sagemaker.max_wait: only applies to managed spot training; set spot: true or remove it")
    if job.spot and wait is not None and wait < runtime:
        problems.append(
            f"sagemaker.max_wait: {wait}s is less than max_runtime {runtime}s; "
            "managed spot needs max_wait >= max_runtime (the wait includes the run)"
        )
    if wait is not None and wait > MAX_RUNTIME_LIMIT_S:
        problems.append(f"sagemaker.max_wait: {wait}s is more than SageMaker's 28 days ({MAX_RUNTIME_LIMIT_S}s)")
    return problems


def _program_problems(job: JobSpec) -> list[str]:
    """A code job's command as SageMaker runs it: `python SCRIPT --key value ...` from source_dir."""
    sec = section(job)
    if sec.source_dir is None:
        if sec.entry_point is not None:
            return ["sagemaker.entry_point: needs sagemaker.source_dir (the folder the script is in)"]
        return []
    if job.trainer is not None:
        return ["sagemaker.source_dir: only for command jobs; trainer jobs run the trainer inside the image"]
    if job.launch == "per_node" or job.function is not None:
        return []  # the argv runs as written from the unpacked code (trainctl_command)
    try:
        source_program(job)
    except JobError as exc:
        return exc.problems
    return []


def _hyperparameter_problems(job: JobSpec) -> list[str]:
    """SageMaker's hyperparameter limits, each problem named by the trainer or command field it comes from."""
    hp = hyperparameters(job, training_job_name(job))

    def field_of(key: str | None) -> str:
        if key is None:
            return "trainer" if job.trainer is not None else "command"
        return "command" if key == COMMAND_KEY or job.trainer is None else f"trainer.{key}"

    return limits.hyperparameter_problems(hp, field_of)


def render(job: JobSpec, *, now: datetime | None = None, token: str = "", local: bool = False) -> Rendered:
    """The CreateTrainingJob request as JSON. Without `now` the name ends in the job's hash (deterministic);
    submit passes `now` and a random `token`; `local`: the request local mode (-O local=true) runs."""
    validate(job, local=local)
    shown, uploads = (job, []) if local else data_upload.placeholders(job)  # local mode reads the paths
    request = build_request(shown, training_job_name(job, now, token), local=local)
    return Rendered(
        target="sagemaker",
        text=json_text(request),
        native=request,
        filename=f"{job.name}.create-training-job.json",
        notes=(*notes(job), *uploads),
    )

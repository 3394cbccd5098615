"""Job -> SageMaker CreateTrainingJob request -> JSON bytes. Pure: no I/O, no boto3, no clock.

`validate` checks every rule SageMaker would enforce later; `request.build_request` builds the
request that `boto3.client("sagemaker").create_training_job(**request)` takes, field for field, so
`trainctl render --target sagemaker` shows exactly what would be sent.
"""

from __future__ import annotations

import re
from datetime import datetime

from ...errors import JobError, did_you_mean
from ...job import Job
from ..base import Rendered, json_text
from .instances import INSTANCE_TYPES, lookup
from .request import (
    CODE_CHANNEL,
    COMMAND_KEY,
    DEFAULT_MAX_RUNTIME_S,
    MAX_RETRIES,
    MAX_RUNTIME_LIMIT_S,
    build_request,
    hyperparameters,
    notes,
    output_uri,
    section,
    source_program,
    training_job_name,
)

_ROLE_ARN = re.compile(r"^arn:aws[a-z-]*:iam::\d{12}:role/[\w+=,.@/-]{1,512}$")
_S3_URI = re.compile(r"^s3://[a-z0-9][a-z0-9.-]{1,61}[a-z0-9](/.*)?$")
_ECR_IMAGE = re.compile(r"^\d{12}\.dkr\.ecr\.[a-z0-9-]+\.amazonaws\.com(\.cn)?/")
_DLC_PYTORCH = re.compile(r"^\d{12}\.dkr\.ecr\.[a-z0-9-]+\.amazonaws\.com(\.cn)?/pytorch-training[:@]")
_REGION = re.compile(r"^[a-z]{2}(-[a-z]+)+-\d$")


def _s3_problem(field: str, value: str | None) -> list[str]:
    if value is None or _S3_URI.match(value):
        return []
    return [f"{field}: got {value!r}; SageMaker needs an s3://bucket/prefix URI here"]


def validate(job: Job) -> None:
    """Every rule SageMaker would enforce later (or silently get wrong), checked before anything is sent."""
    sec = section(job)
    res = job.resources
    problems = [*sec.required_for_submit()]
    if sec.role_arn is not None and not _ROLE_ARN.match(sec.role_arn):
        problems.append(
            f"sagemaker.role_arn: got {sec.role_arn!r}; expected a full IAM role ARN such as "
            "arn:aws:iam::123456789012:role/SageMakerExecution (a bare name would make the SDK call IAM)"
        )
    if sec.region is not None and not _REGION.match(sec.region):
        problems.append(f"sagemaker.region: got {sec.region!r}; expected a region such as us-east-1")
    inst = lookup(sec.instance_type) if sec.instance_type else None
    if sec.instance_type is not None and inst is None:
        problems.append(
            f"sagemaker.instance_type: {sec.instance_type!r} is not a known training instance type"
            f"{did_you_mean(sec.instance_type, INSTANCE_TYPES)}; known: {', '.join(INSTANCE_TYPES)} "
            "(add a row to targets/sagemaker/instances.py for another)"
        )
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
    if not _ECR_IMAGE.match(job.image):
        problems.append(
            f"image: got {job.image!r}; SageMaker pulls training images from Amazon ECR only: push the trainer "
            "image to <account>.dkr.ecr.<region>.amazonaws.com/<repo>:<tag> and name that"
        )
    if sec.distribution == "pytorchddp":
        if not _DLC_PYTORCH.match(job.image):
            problems.append(
                "sagemaker.distribution: pytorchddp is SageMaker's data-parallel library (smdistributed), which "
                f"only AWS's PyTorch training images (…/pytorch-training:TAG) carry; image {job.image!r} is not one. "
                "Use distribution: torch_distributed (torchrun, the trainer image's way)"
            )
        if inst is not None and inst.gpus == 0:
            problems.append(f"sagemaker.distribution: pytorchddp needs GPU instances; {inst.name} has none")
    for name, uri in job.data.items():
        problems += _s3_problem(f"data.{name}", uri)
    if CODE_CHANNEL in job.data and sec.source_dir is not None:
        problems.append("data.code: the channel name 'code' carries sagemaker.source_dir; rename this input")
    problems += _s3_problem("sagemaker.output_s3_uri", sec.output_s3_uri)
    problems += _s3_problem("output_dir", job.output_dir)
    problems += _s3_problem("sagemaker.checkpoint_s3_uri", sec.checkpoint_s3_uri)
    problems += _s3_problem("checkpoint.dir", job.checkpoint.dir)
    problems += _s3_problem("sagemaker.code_s3_prefix", sec.code_s3_prefix)
    if output_uri(job) is None:
        problems.append("sagemaker.output_s3_uri: required to submit to SageMaker (or set output_dir to s3://...)")
    runtime = job.max_runtime_seconds or DEFAULT_MAX_RUNTIME_S
    if runtime > MAX_RUNTIME_LIMIT_S:
        problems.append(f"max_runtime: {runtime}s is more than SageMaker's 28 days ({MAX_RUNTIME_LIMIT_S}s)")
    wait = sec.max_wait_seconds
    if wait is not None and not job.spot:
        problems.append("sagemaker.max_wait: only applies to managed spot training; set spot: true or remove it")
    if job.spot and wait is not None and wait < runtime:
        problems.append(
            f"sagemaker.max_wait: {wait}s is less than max_runtime {runtime}s; "
            "managed spot needs max_wait >= max_runtime (the wait includes the run)"
        )
    if wait is not None and wait > MAX_RUNTIME_LIMIT_S:
        problems.append(f"sagemaker.max_wait: {wait}s is more than SageMaker's 28 days ({MAX_RUNTIME_LIMIT_S}s)")
    if job.retries > MAX_RETRIES:
        problems.append(f"retries: {job.retries}; SageMaker's RetryStrategy allows at most {MAX_RETRIES}")
    if bool(sec.subnets) != bool(sec.security_group_ids):
        problems.append("sagemaker.subnets / sagemaker.security_group_ids: a VpcConfig needs both, or neither")
    for key, value in job.env.items():
        if len(value) > 512:
            problems.append(f"env.{key}: {len(value)} characters; SageMaker allows at most 512 per value")
    if len(job.env) + len(job.secrets) > 100:
        problems.append("env: SageMaker allows at most 100 environment variables (secrets count too)")
    if sec.source_dir is not None:
        if job.trainer is not None:
            problems.append(
                "sagemaker.source_dir: only for command jobs; trainer jobs run the trainer inside the image"
            )
        else:
            try:
                source_program(job)
            except JobError as exc:
                problems += exc.problems
    elif sec.entry_point is not None:
        problems.append("sagemaker.entry_point: needs sagemaker.source_dir (the folder the script is in)")
    if problems:
        raise JobError(problems)
    # Checked last: only meaningful once everything else is well formed.
    hp = hyperparameters(job, training_job_name(job))
    for key, value in hp.items():
        if len(value) > 2500:
            where = "command" if key == COMMAND_KEY else f"trainer.{key}"
            raise JobError(
                [f"{where}: encoded as a hyperparameter it is {len(value)} characters; SageMaker allows 2500"]
            )


def render(job: Job, *, now: datetime | None = None) -> Rendered:
    """The CreateTrainingJob request as JSON. Without `now` the name ends in the job's hash (deterministic)."""
    validate(job)
    request = build_request(job, training_job_name(job, now))
    return Rendered(
        target="sagemaker",
        text=json_text(request),
        native=request,
        filename=f"{job.name}.create-training-job.json",
        notes=notes(job),
    )

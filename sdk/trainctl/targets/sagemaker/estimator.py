"""The bridge to the SageMaker Python SDK: the same job as a `sagemaker.pytorch.PyTorch` estimator.

For notebook users who want the SDK's object (`job.to_estimator().fit()`), and for
`job.submit(target="sagemaker", via="estimator")`. Needs the SageMaker SDK 2.x (>=2.257; 3.x removed the
estimator: model_trainer.py is the bridge for 3.x). The estimator is built so the SDK never calls STS, IAM or its telemetry
endpoint: a full role ARN, explicit output/code/checkpoint locations, and TelemetryOptOut in the
session's config (tests/sagemaker fails any connection to anything but the local emulator).

Differences from the direct request, all bookkeeping: the SDK always uploads an entry point, so trainer
and plain command jobs carry `sagemaker_program=sagemaker_entry.py` (a two-line shim that runs
`trainer.train`; for command jobs `trainctl_command` wins), plus `sagemaker_submit_directory`,
`sagemaker_job_name`, `sagemaker_region` and `sagemaker_container_log_level`.
"""

from __future__ import annotations

import json
import logging
import os
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ...errors import EngineError, JobError
from ...spec import JobSpec
from .container import container
from .render import validate
from .request import (
    CHECKPOINT_DIR,
    CODE_CHANNEL,
    CODE_TARBALL,
    CONTAINER_ENTRYPOINT,
    DEFAULT_MAX_RUNTIME_S,
    checkpoint_uri,
    container_arguments,
    environment,
    output_uri,
    program_hyperparameters,
    s3_join,
    section,
    source_program,
    tensorboard_local_path,
    training_job_name,
    utc_now,
    with_instance_defaults,
)

if TYPE_CHECKING:
    import boto3

# Package data, not a module: the file the SDK uploads as the entry point (see shipped/).
ENTRY_SHIM = Path(__file__).with_name("shipped") / "sagemaker_entry.py"
TELEMETRY_OFF = {"SchemaVersion": "1.0", "SageMaker": {"PythonSDK": {"Modules": {"TelemetryOptOut": True}}}}
SDK_ONLY_HYPERPARAMETERS = (
    "sagemaker_program",
    "sagemaker_submit_directory",
    "sagemaker_job_name",
    "sagemaker_region",
    "sagemaker_container_log_level",
)


@cache
def _import_sdk() -> Any:
    os.environ.setdefault("SAGEMAKER_SUPPRESS_V2_WARNING", "1")
    # The SDK logs its config lookups at INFO straight to stdout, which would corrupt `--output json`;
    # it only sets a level on this logger when none is set.
    logging.getLogger("sagemaker.config").setLevel(logging.WARNING)
    try:
        import sagemaker.pytorch
        import sagemaker.utils
    except ImportError as exc:
        raise EngineError(
            "the estimator bridge needs the SageMaker Python SDK 2.x", hint="pip install 'trainctl[sagemaker]'"
        ) from exc
    _validate_each_config_once(sagemaker.utils)
    return sagemaker


def _validate_each_config_once(utils: Any) -> None:
    """Memoise the SDK's config validation (same dict, same verdict).

    SDK 2.x re-checks its whole JSON schema on every config lookup (about 20 per `fit`, ~0.3-1 s each);
    a config is needed at all only to set TelemetryOptOut. Unseen configs are still validated.
    """
    original = utils.validate_sagemaker_config
    seen: set[str] = set()

    def validate(sagemaker_config: dict[str, Any] | None = None) -> None:
        key = json.dumps(sagemaker_config, sort_keys=True, default=repr)
        if key not in seen:
            original(sagemaker_config)
            seen.add(key)

    utils.validate_sagemaker_config = validate


@cache
def _estimator_class() -> type:
    """`sagemaker.pytorch.PyTorch` whose fit() adds the job's channels (data and code) by itself."""
    base: Any = _import_sdk().pytorch.PyTorch

    class TrainctlPyTorch(base):
        """A PyTorch estimator for one trainctl job; `fit()` needs no arguments."""

        trainctl_job: JobSpec

        def fit(
            self, inputs: Any = None, wait: bool = True, logs: Any = "All", job_name: str | None = None, **kw: Any
        ) -> Any:
            name = job_name or training_job_name(self.trainctl_job, utc_now())
            merged = {**channels(self.trainctl_job, name), **(inputs or {})}
            return super().fit(inputs=merged, wait=wait, logs=logs, job_name=name, **kw)

    return TrainctlPyTorch


def code_location(job: JobSpec) -> str:
    prefix = section(job).code_s3_prefix or output_uri(job)
    assert prefix is not None
    return prefix


def channels(job: JobSpec, name: str) -> dict[str, Any]:
    """fit() inputs: every s3:// data input, plus `code` = the tarball the SDK uploads for `name`."""
    sdk = _import_sdk()
    found = {
        channel: sdk.inputs.TrainingInput(uri, distribution="FullyReplicated", s3_data_type="S3Prefix")
        for channel, uri in sorted(job.data.items())
    }
    if container(job) == "trainctl":  # the toolkit downloads sagemaker_submit_directory itself
        code = s3_join(code_location(job), name, "source", CODE_TARBALL)
        found[CODE_CHANNEL] = sdk.inputs.TrainingInput(code, distribution="FullyReplicated", s3_data_type="S3Prefix")
    return found


def sdk_session(job: JobSpec, boto_session: boto3.Session | None = None) -> Any:
    """A SageMaker SDK session that needs no STS call (explicit bucket) and sends no telemetry."""
    sdk = _import_sdk()
    import boto3

    sec = section(job)
    boto = boto_session or boto3.Session(region_name=sec.region)
    bucket = (output_uri(job) or "").removeprefix("s3://").split("/", 1)[0]
    return sdk.session.Session(boto_session=boto, default_bucket=bucket, sagemaker_config=TELEMETRY_OFF)


def _tensorboard(job: JobSpec) -> Any:
    sec = section(job)
    if not sec.tensorboard_s3_uri:
        return None
    from sagemaker.debugger import TensorBoardOutputConfig

    local = tensorboard_local_path(job)
    return TensorBoardOutputConfig(s3_output_path=sec.tensorboard_s3_uri, container_local_output_path=local)


def to_estimator(job: JobSpec, *, boto_session: boto3.Session | None = None, **overrides: Any) -> Any:
    """The job as a `sagemaker.pytorch.PyTorch` estimator; `overrides` go to its constructor last."""
    validate(job)
    job = with_instance_defaults(job)
    sec = section(job)
    unsupported = [f for f in ("instance_groups", "max_pending_time") if getattr(sec, f)]
    if unsupported:
        raise JobError(
            [
                f"sagemaker.{f}: not something the estimator bridge builds (SDK 2.x); use via='direct'"
                for f in unsupported
            ]
        )
    toolkit = container(job) == "toolkit"
    if sec.source_dir is not None:
        from .source_dir import resolve_source_dir

        script, hyperparameters = source_program(job)
        entry_point, source_dir = script, str(resolve_source_dir(sec.source_dir, job.base_dir))
        if toolkit:
            hyperparameters = {
                k: v for k, v in program_hyperparameters(job, "").items() if k not in SDK_ONLY_HYPERPARAMETERS
            }
    else:
        entry_point, source_dir = str(ENTRY_SHIM), None
        hyperparameters = program_hyperparameters(job, "")
    runtime = job.max_runtime_seconds or DEFAULT_MAX_RUNTIME_S
    tags = [{"Key": k, "Value": v} for k, v in sorted({**sec.tags, "trainctl:job": job.name}.items())]
    kwargs: dict[str, Any] = {
        "entry_point": entry_point,
        "source_dir": source_dir,
        "image_uri": job.image,
        "role": sec.role_arn,
        "instance_type": sec.instance_type,
        "instance_count": job.resources.nodes,
        "volume_size": sec.volume_size_gb,
        "input_mode": sec.input_mode,
        "max_run": runtime,
        "use_spot_instances": job.spot,
        "max_wait": (sec.max_wait_seconds or runtime) if job.spot else None,
        "max_retry_attempts": job.retries or None,
        "checkpoint_s3_uri": checkpoint_uri(job),
        "checkpoint_local_path": CHECKPOINT_DIR,
        "output_path": output_uri(job),
        "code_location": code_location(job),
        "hyperparameters": hyperparameters,
        "distribution": {sec.distribution: {"enabled": True}},
        "environment": environment(job),
        "subnets": list(sec.subnets) or None,
        "security_group_ids": list(sec.security_group_ids) or None,
        "tags": tags,
        "base_job_name": job.name,
        "container_entry_point": None if toolkit else list(CONTAINER_ENTRYPOINT),
        "container_arguments": None if toolkit else container_arguments(job),
        "container_log_level": sec.container_log_level,
        "keep_alive_period_in_seconds": sec.keep_alive_seconds,
        "output_kms_key": sec.output_kms_key_id,
        "volume_kms_key": sec.volume_kms_key_id,
        "enable_network_isolation": sec.network_isolation,
        "encrypt_inter_container_traffic": sec.inter_container_encryption,
        "tensorboard_output_config": _tensorboard(job),
        "disable_profiler": True,
        "debugger_hook_config": False,
        "sagemaker_session": sdk_session(job, boto_session),
        **overrides,
    }
    if str(kwargs["instance_type"]).startswith("local"):
        # The SDK's local mode refuses S3 checkpoints (sagemaker/estimator.py, _add_spot_checkpoint_args);
        # the trainer still checkpoints to /opt/ml/checkpoints inside the container.
        kwargs.update(checkpoint_s3_uri=None, checkpoint_local_path=None)
    estimator = _estimator_class()(**kwargs)
    estimator.trainctl_job = job
    return estimator


def fit(job: JobSpec, name: str, boto_session: boto3.Session | None = None) -> Any:
    """Create the training job `name` through the SDK, without waiting for it."""
    estimator = to_estimator(job, boto_session=boto_session)
    try:
        estimator.fit(wait=False, logs=False, job_name=name)
    except EngineError:
        raise
    except Exception as exc:  # the SDK raises botocore and ValueError alike
        raise EngineError(f"create training job {name} via the SageMaker SDK: {exc}") from exc
    return estimator

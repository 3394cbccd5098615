"""The bridge to the SageMaker Python SDK 2.x: the same job as a `sagemaker.pytorch.PyTorch` estimator.

For notebook users who want the SDK's object (`job.to_estimator().fit()`), and for
`job.submit(target="sagemaker", via="estimator")`. Needs the SageMaker SDK 2.x (>=2.257; 3.x removed the
estimator: model_trainer.py is the bridge for 3.x). Every argument comes from the rendered request, field
by field (`estimator_arguments`, through sdk_bridge.RequestFields), so the two cannot differ. SDK 2.x has
no argument for StoppingCondition.MaxPendingTimeInSeconds (sagemaker/job.py `_Job._prepare_stop_condition`
writes MaxRuntimeInSeconds and MaxWaitTimeInSeconds only), so a job with max_pending_time is refused here.
The estimator is built so the SDK never calls STS, IAM or its telemetry endpoint: a full role ARN, explicit
output/code/checkpoint locations, and TelemetryOptOut in the session's config (tests/sagemaker fails any
connection to anything but the local emulator).

What the SDK adds, all bookkeeping: it always uploads an entry point, so trainer and plain command jobs
carry `sagemaker_program=sagemaker_entry.py` (a two-line shim that runs `trainer.train`; for command jobs
`trainctl_command` wins) and a `code` channel, plus `sagemaker_submit_directory`, `sagemaker_job_name`,
`sagemaker_region`, `sagemaker_container_log_level` and ProfilerConfig (turned off).
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Mapping
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ...errors import EngineError, JobError
from ...spec.job_spec import JobSpec
from ...submit.bundle import prepare, resolve_dir
from . import container as ct
from .aws_calls import upload_source
from .render import validate
from .request import (
    CODE_CHANNEL,
    PROGRAM_KEY,
    SMDDP_KEY,
    SMDDP_MPI_OPTIONS_KEY,
    SUBMIT_DIR_KEY,
    TORCH_DISTRIBUTED_KEY,
    build_request,
    code_prefix,
    s3_channel,
    tarball_uri,
    training_job_name,
    utc_now,
    with_instance_defaults,
)
from .sdk_bridge import FieldPath, RequestFields, check_run_fields, installed_sdk_text, session_arguments

if TYPE_CHECKING:
    import boto3

BRIDGE = "estimator bridge (SDK 2.x)"
# Package data, not a module: the file the SDK uploads as the entry point (see shipped/).
ENTRY_SHIM = Path(__file__).with_name("shipped") / "sagemaker_entry.py"
AT_FIT: tuple[FieldPath, ...] = (
    ("TrainingJobName",),
    ("InputDataConfig",),
    ("HyperParameters", SUBMIT_DIR_KEY),
    ("HyperParameters", ct.JOB_NAME_KEY),
    ("CheckpointConfig", "S3Uri"),
)
"""What fit() takes from the run's own request (the SDK writes the two hyperparameters from the run's name; the
default checkpoint prefix is the training job's own)."""
CANNOT_CARRY: dict[FieldPath, str] = {("StoppingCondition", "MaxPendingTimeInSeconds"): "sagemaker.max_pending_time"}
"""Request fields SDK 2.x has no argument for (sagemaker/job.py `_Job._prepare_stop_condition`), by the job's field."""


@cache
def _import_sdk() -> Any:
    os.environ.setdefault("SAGEMAKER_SUPPRESS_V2_WARNING", "1")
    # The SDK logs its config lookups at INFO straight to stdout, which would corrupt `--output json`;
    # it only sets a level on this logger when none is set.
    logging.getLogger("sagemaker.config").setLevel(logging.WARNING)
    try:
        import sagemaker.debugger
        import sagemaker.instance_group
        import sagemaker.pytorch
        import sagemaker.utils
    except ImportError as exc:
        raise EngineError(
            f"the estimator bridge needs the SageMaker Python SDK 2.x; {installed_sdk_text()}",
            hint="pip install 'trainctl[sagemaker2]' (SDK 2.x in place of 3.x), or keep SDK 3.x and use "
            "job.to_model_trainer() (or submit -O via=model_trainer)",
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
    """`sagemaker.pytorch.PyTorch` whose fit() names the run and adds its channels (data and code) by itself."""
    base: Any = _import_sdk().pytorch.PyTorch

    class TrainctlPyTorch(base):
        """A PyTorch estimator for one trainctl job; `fit()` needs no arguments."""

        trainctl_job: JobSpec
        trainctl_request: dict[str, Any]
        source_dir: str | None  # the SDK's: a folder it packs, or an s3:// tarball it takes as it is

        def fit(
            self, inputs: Any = None, wait: bool = True, logs: Any = "All", job_name: str | None = None, **kw: Any
        ) -> Any:
            name = job_name or training_job_name(self.trainctl_job, utc_now())
            run = build_request(self.trainctl_job, name)
            check_run_fields(self.trainctl_request, run, AT_FIT, BRIDGE)
            if self.checkpoint_local_path:  # not the SDK's local mode, which takes no S3 checkpoints
                self.checkpoint_s3_uri = run["CheckpointConfig"]["S3Uri"]
            if self.source_dir is not None and not _mounts_code(self.sagemaker_session):
                self.source_dir = _upload_bundle(self.trainctl_job, run["TrainingJobName"], self.sagemaker_session)
            merged = {**channels(self.trainctl_job, run), **(inputs or {})}
            return super().fit(inputs=merged, wait=wait, logs=logs, job_name=run["TrainingJobName"], **kw)

    return TrainctlPyTorch


def _upload_bundle(job: JobSpec, name: str, session: Any) -> str:
    """trainctl's own code bundle, uploaded where the request's code channel points; its S3 URI becomes the
    estimator's source_dir. Left a local folder, SDK 2.x packs a tarball of its own (sagemaker/fw_utils.py
    tar_and_upload_dir), whose sha256 is not the TRAINER_CODE_SHA256 the launcher checks: every code job would
    exit 2 on SageMaker. An s3:// source_dir the SDK takes as it is (the same function: `UploadedCode(s3_prefix=
    directory)`, with or without network isolation: Framework._prepare_for_training)."""
    uri = upload_source(job, name, session.boto_session)
    if uri is None:
        raise EngineError(f"{BRIDGE}: the job's code has no S3 location (sagemaker.code_s3_prefix or output_s3_uri)")
    return uri


def _mounts_code(session: Any) -> bool:
    """The SDK's local mode with `local.local_code`: it mounts the folder itself, no tarball (the same test as
    sagemaker/estimator.py Framework._prepare_for_training; the launcher says that folder has no sha256 check)."""
    local_code = _import_sdk().utils.get_config_value("local.local_code", session.config)
    return bool(getattr(session, "local_mode", False) and local_code)


def training_input(channel: Mapping[str, Any]) -> Any:
    """One channel of the request as the SDK's TrainingInput (every field of it, or EngineError)."""
    fields = RequestFields(channel, BRIDGE)
    source = ("DataSource", "S3DataSource")
    found = _import_sdk().inputs.TrainingInput(
        fields.take(*source, "S3Uri"),
        distribution=fields.take(*source, "S3DataDistributionType"),
        s3_data_type=fields.take(*source, "S3DataType"),
        instance_groups=fields.take(*source, "InstanceGroupNames"),
    )
    fields.take("ChannelName")  # the key of fit()'s inputs
    fields.finish()
    return found


def channels(job: JobSpec, run: Mapping[str, Any]) -> dict[str, Any]:
    """fit() inputs: the run's channels; for trainctl's image also `code`, the tarball the SDK uploads (its
    entry shim) when the job has no code of its own (a toolkit image downloads sagemaker_submit_directory).

    Under network isolation the SDK adds the `code` channel itself (sagemaker/estimator.py
    Framework._prepare_for_training sets `code_uri`, sagemaker/job.py `_Job._load_config` appends it and
    refuses a second), so it is left out here; that channel names no instance groups (`_Job._prepare_channel`).
    """
    listed = list(run.get("InputDataConfig", []))
    if ct.container(job) == "trainctl" and CODE_CHANNEL not in [c["ChannelName"] for c in listed]:
        code = tarball_uri(job, run["TrainingJobName"])
        assert code is not None
        listed.append(s3_channel(job, CODE_CHANNEL, code))
    if run.get("EnableNetworkIsolation"):
        listed = [c for c in listed if c["ChannelName"] != CODE_CHANNEL]
    return {channel["ChannelName"]: training_input(channel) for channel in listed}


def _refuse_isolated_group_channels(fields: RequestFields) -> None:
    """Under network isolation SDK 2.x adds the code channel itself (channels), naming no instance group."""
    listed = fields.get("InputDataConfig", default=[])
    if fields.get("EnableNetworkIsolation") and any(
        "InstanceGroupNames" in c["DataSource"]["S3DataSource"] for c in listed
    ):
        raise JobError(
            [
                "sagemaker.network_isolation: not through the estimator bridge when instance groups name their "
                "channels: SDK 2.x then adds the code channel itself, naming no instance group, and SageMaker "
                "wants every channel to name its groups; use via='direct'"
            ]
        )


def _script_mode(job: JobSpec, fields: RequestFields) -> dict[str, Any]:
    """The arguments SDK 2.x writes its script-mode hyperparameters from (sagemaker/estimator.py
    Framework._script_mode_hyperparam_update: program, submit directory, log level, job name, region)."""
    hp = ("HyperParameters",)
    program = fields.take_decoded(*hp, PROGRAM_KEY)
    submit_dir = fields.take(
        *hp, SUBMIT_DIR_KEY
    )  # code_location/<job name>/source/sourcedir.tar.gz, or its channel copy
    if program is None and submit_dir is not None:
        raise JobError(
            [
                "launch: per_node with code: SDK 2.x would upload its own entry point as the code and name it in "
                "sagemaker_submit_directory, in place of your folder; use via='direct' (the default) or local=true"
            ]
        )
    fields.take(*hp, ct.JOB_NAME_KEY)  # fit()'s job name
    fields.take(*hp, ct.REGION_KEY)  # the session's region
    log_level = fields.take_decoded(*hp, ct.LOG_LEVEL_KEY)
    if program is not None:  # a code job: the SDK packs the folder and uploads it where the request says
        entry_point, source_dir = program, str(_code_folder(job))
    else:
        entry_point, source_dir = str(ENTRY_SHIM), None
    return {
        "entry_point": entry_point,
        "source_dir": source_dir,
        "code_location": code_prefix(job),
        **({"container_log_level": log_level} if log_level is not None else {}),
    }


def _distribution(fields: RequestFields, instance_groups: list[Any]) -> dict[str, Any]:
    """`distribution`, from which sagemaker/pytorch/estimator.py PyTorch._pytorch_distribution_configuration
    writes the distribution's hyperparameters."""
    hp = ("HyperParameters",)
    smddp = fields.take_decoded(*hp, SMDDP_KEY)
    fields.take(*hp, SMDDP_MPI_OPTIONS_KEY)
    fields.take(*hp, TORCH_DISTRIBUTED_KEY)
    distribution: dict[str, Any] = {"pytorchddp" if smddp else "torch_distributed": {"enabled": True}}
    training_groups = json.loads(fields.get(*hp, ct.DISTRIBUTION_GROUPS_KEY, default="[]"))
    if training_groups:
        # fw_utils.validate_distribution wants the training group named among several; the torch_distributed
        # path does not write its key, so it also stays a hyperparameter (estimator_arguments).
        distribution["instance_groups"] = [g for g in instance_groups if g.instance_group_name in training_groups]
    return distribution


def estimator_arguments(job: JobSpec, fields: RequestFields) -> dict[str, Any]:
    """The estimator's arguments, each from its field of the request. The job says only where its code folder
    is and the estimator's name; fit() takes the AT_FIT fields from the run's own request."""
    sdk = _import_sdk()
    _refuse_isolated_group_channels(fields)
    for path in AT_FIT:
        fields.take(*path)
    instance_groups = [
        sdk.instance_group.InstanceGroup(g["InstanceGroupName"], g["InstanceType"], g["InstanceCount"])
        for g in fields.take("ResourceConfig", "InstanceGroups", default=[])
    ]
    kwargs = {**_script_mode(job, fields), "distribution": _distribution(fields, instance_groups)}
    tensorboard = fields.take("TensorBoardOutputConfig")
    if tensorboard is not None:
        kwargs["tensorboard_output_config"] = sdk.debugger.TensorBoardOutputConfig(
            s3_output_path=tensorboard["S3OutputPath"], container_local_output_path=tensorboard["LocalPath"]
        )
    return {
        **kwargs,
        "base_job_name": job.name,
        "hyperparameters": {key: json.loads(value) for key, value in fields.take_rest("HyperParameters").items()},
        "image_uri": fields.take("AlgorithmSpecification", "TrainingImage"),
        "input_mode": fields.take("AlgorithmSpecification", "TrainingInputMode"),
        "container_entry_point": fields.take("AlgorithmSpecification", "ContainerEntrypoint"),
        "container_arguments": fields.take("AlgorithmSpecification", "ContainerArguments"),
        "metric_definitions": fields.take("AlgorithmSpecification", "MetricDefinitions"),
        "role": fields.take("RoleArn"),
        "instance_type": fields.take("ResourceConfig", "InstanceType"),
        "instance_count": fields.take("ResourceConfig", "InstanceCount"),
        "instance_groups": instance_groups or None,
        "volume_size": fields.take("ResourceConfig", "VolumeSizeInGB"),
        "keep_alive_period_in_seconds": fields.take("ResourceConfig", "KeepAlivePeriodInSeconds"),
        "volume_kms_key": fields.take("ResourceConfig", "VolumeKmsKeyId"),
        "output_path": fields.take("OutputDataConfig", "S3OutputPath"),
        "output_kms_key": fields.take("OutputDataConfig", "KmsKeyId"),
        "checkpoint_s3_uri": fields.take("CheckpointConfig", "S3Uri"),
        "checkpoint_local_path": fields.take("CheckpointConfig", "LocalPath"),
        "max_run": fields.take("StoppingCondition", "MaxRuntimeInSeconds"),
        "max_wait": fields.take("StoppingCondition", "MaxWaitTimeInSeconds"),
        "use_spot_instances": fields.take("EnableManagedSpotTraining"),
        "max_retry_attempts": fields.take("RetryStrategy", "MaximumRetryAttempts"),
        "environment": fields.take("Environment"),
        "subnets": fields.take("VpcConfig", "Subnets"),
        "security_group_ids": fields.take("VpcConfig", "SecurityGroupIds"),
        "enable_network_isolation": fields.take("EnableNetworkIsolation", default=False),
        "encrypt_inter_container_traffic": fields.take("EnableInterContainerTrafficEncryption", default=False),
        "tags": fields.take("Tags"),
        "disable_profiler": True,
        "debugger_hook_config": False,
    }


def _code_folder(job: JobSpec) -> Path:
    """The job's code folder (`code:` or sagemaker.source_dir), resolved as its bundle resolves it."""
    assert job.code_spec is not None
    return resolve_dir(job.code_spec, job.base_dir, job.code_field)


def to_estimator(job: JobSpec, *, boto_session: boto3.Session | None = None, **overrides: Any) -> Any:
    """The job as a `sagemaker.pytorch.PyTorch` estimator; `overrides` go to its constructor last."""
    job = prepare(job)  # its code bundle packed, if not yet (the request names its sha256)
    validate(job)
    job = with_instance_defaults(job)
    request = build_request(job, training_job_name(job))
    fields = RequestFields(request, BRIDGE)
    kwargs = estimator_arguments(job, fields)
    fields.finish(CANNOT_CARRY)
    sdk = _import_sdk()
    kwargs["sagemaker_session"] = sdk.session.Session(**session_arguments(job, boto_session))
    kwargs.update(overrides)
    if str(kwargs["instance_type"]).startswith("local"):
        # The SDK's local mode refuses S3 checkpoints (sagemaker/estimator.py, _add_spot_checkpoint_args);
        # the trainer still checkpoints to /opt/ml/checkpoints inside the container.
        kwargs.update(checkpoint_s3_uri=None, checkpoint_local_path=None)
    estimator = _estimator_class()(**kwargs)
    estimator.trainctl_job = job
    estimator.trainctl_request = request
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

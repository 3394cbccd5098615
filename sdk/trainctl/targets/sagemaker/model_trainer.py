"""The bridge to the SageMaker Python SDK 3.x: the same job as a `sagemaker.train.ModelTrainer`.

SDK 3.x (`pip install sagemaker` today; the training part is the `sagemaker-train` package) has no
Estimator; `ModelTrainer` is its way. `job.to_model_trainer()` builds one from the rendered request,
field by field (`trainer_arguments`, through sdk_bridge.RequestFields): image, role, compute (instance
type/count or instance groups, volume, spot, warm pool, volume KMS key), networking (VPC, isolation,
encryption), stopping condition, output (and its KMS key), checkpoint, input mode, environment,
hyperparameters, tags, retry strategy and TensorBoard output, so they cannot differ.

It runs trainctl's launcher, not the SDK's own torchrun driver: `source_code`/`distributed` are left
unset (they would replace the entry point with the SDK's `sm_train.sh` and lose secrets, the status file
and `/opt/ml/output/failure`). What ModelTrainer cannot say without its driver a small subclass adds
when it builds the request, from the run's own request: ContainerEntrypoint/ContainerArguments for
trainctl's image, the job's name (`<job>-<UTC time>-<4 hex>`, as `submit` names runs), the channels with
their instance groups, the hyperparameters that name the code tarball, and the tarball's upload. The
session sets TelemetryOptOut.

`training_mode=Mode.LOCAL_CONTAINER` builds the same trainer for the SDK's local container mode
(sagemaker/train/local/local_container.py, `_LocalContainer`): docker compose runs `algo-1..N` of the job's
image on this machine with the same entry point, arguments, hyperparameters, environment and channels.
What that mode cannot take is changed or refused here, as `to_estimator(instance_type="local")` does.
"""

from __future__ import annotations

import secrets
from collections.abc import Mapping
from functools import cache
from typing import TYPE_CHECKING, Any

from ...errors import EngineError, JobError
from ...spec.job_spec import JobSpec
from ...submit.bundle import prepare
from .render import validate
from .request import (
    CODE_CHANNEL,
    CODE_TARBALL,
    build_request,
    section,
    training_job_name,
    utc_now,
    with_instance_defaults,
)
from .sdk_bridge import FieldPath, RequestFields, check_run_fields, session_arguments, without_credentials_said

if TYPE_CHECKING:
    import boto3

BRIDGE = "ModelTrainer bridge (SDK 3.x)"
AT_TRAIN: tuple[FieldPath, ...] = (
    ("TrainingJobName",),
    ("AlgorithmSpecification", "ContainerEntrypoint"),
    ("AlgorithmSpecification", "ContainerArguments"),
    ("InputDataConfig",),
    ("HyperParameters",),
    ("CheckpointConfig", "S3Uri"),
)
"""What the subclass sets from the run's own request when it sends it: what names the run (its name, the code
channel, the hyperparameters naming the code tarball, the default checkpoint prefix: the training job's own), and
what ModelTrainer's constructor has no argument for
(it writes ContainerEntrypoint/ContainerArguments only for its own driver: model_trainer.py
`_create_training_job_args`)."""


@cache
def _sdk() -> Any:
    try:
        import sagemaker.core.shapes as shapes
        import sagemaker.train.configs as configs
        from sagemaker.core.helper.session_helper import Session
        from sagemaker.train import ModelTrainer
    except ImportError as exc:
        raise EngineError(
            "the ModelTrainer bridge needs the SageMaker Python SDK 3.x (sagemaker-train)",
            hint="pip install 'trainctl[sagemaker]' (SDK 3.x; with SDK 2.x use job.to_estimator())",
        ) from exc
    return ModelTrainer, configs, shapes, Session


@cache
def _trainer_class() -> type:
    model_trainer, _, shapes, _ = _sdk()
    from pydantic import PrivateAttr

    class TrainctlModelTrainer(model_trainer):  # type: ignore[misc, valid-type]
        """A ModelTrainer for one trainctl job: train() sends the job's request through the SDK."""

        _trainctl_job: Any = PrivateAttr(default=None)
        _trainctl_request: Any = PrivateAttr(default=None)

        def _create_training_job_args(self, input_data_config: Any = None, boto3: bool = False) -> dict[str, Any]:
            args: dict[str, Any] = super()._create_training_job_args(input_data_config=input_data_config, boto3=boto3)
            if boto3:
                return args
            job: JobSpec = self._trainctl_job
            run = build_request(job, training_job_name(job, utc_now(), token=secrets.token_hex(2)))
            check_run_fields(self._trainctl_request, run, AT_TRAIN, BRIDGE)
            from .aws_calls import upload_source

            upload_source(job, run["TrainingJobName"], self.sagemaker_session.boto_session)
            spec = run["AlgorithmSpecification"]
            args["training_job_name"] = run["TrainingJobName"]
            args["algorithm_specification"].container_entrypoint = spec.get("ContainerEntrypoint")
            args["algorithm_specification"].container_arguments = spec.get("ContainerArguments")
            args["hyper_parameters"] = run["HyperParameters"]
            if args.get("checkpoint_config") is not None:  # none in local container mode
                args["checkpoint_config"].s3_uri = run["CheckpointConfig"]["S3Uri"]
            local = _is_local(self.training_mode)
            channels = [_channel(shapes, c, local) for c in run.get("InputDataConfig", [])]
            args["input_data_config"] = channels or None
            return args

    return TrainctlModelTrainer


def _channel(shapes: Any, channel: Mapping[str, Any], local: bool = False) -> Any:
    """The request's channel as the SDK's shape (every field of it, or EngineError); in local container mode
    the code channel names its folder.

    SDK 3's local mode downloads an S3 channel into `TemporaryDirectory(...).name`
    (local_container.py, `_get_data_source_local_path`): the object is dropped at once, so the folder
    is gone, and `download_folder` (sagemaker/core/common_utils.py) writes a single-object URI into it
    without creating it: FileNotFoundError (aws/sagemaker-python-sdk#5033). A prefix ending in "/" goes
    through `_download_files_under_prefix`, which creates it. The code tarball is the only object under
    `<run>/source/`, so that prefix gives the container the same `code/sourcedir.tar.gz`.
    """
    fields = RequestFields(channel, BRIDGE)
    name = fields.take("ChannelName")
    s3 = ("DataSource", "S3DataSource")
    uri = fields.take(*s3, "S3Uri")
    if local and name == CODE_CHANNEL and uri.endswith("/" + CODE_TARBALL):
        uri = uri.removesuffix(CODE_TARBALL)
    groups = fields.take(*s3, "InstanceGroupNames")
    source = shapes.S3DataSource(
        s3_data_type=fields.take(*s3, "S3DataType"),
        s3_uri=uri,
        s3_data_distribution_type=fields.take(*s3, "S3DataDistributionType"),
        **({"instance_group_names": groups} if groups is not None else {}),
    )
    fields.finish()
    return shapes.Channel(channel_name=name, data_source=shapes.DataSource(s3_data_source=source))


def _is_local(training_mode: Any) -> bool:
    """`Mode.LOCAL_CONTAINER` (sagemaker/train/model_trainer.py, `Mode`), or its value as a string."""
    return str(getattr(training_mode, "value", training_mode)) == "LOCAL_CONTAINER"


def _local_instance_type(job: JobSpec) -> str:
    """The instance type local container mode understands: `local_gpu` (the GPU reservation in compose) or `local`.

    `_LocalContainer` runs one instance type and count (model_trainer.py `train()` passes
    `resource_config.instance_type`), so instance groups are refused; `local_gpu` is the one value
    `_LocalContainer._create_docker_host` reads (it adds the compose GPU reservation), and SDK 2's local
    mode names the two the same way. The launcher still sees the job's type in `sagemaker_instance_type`.
    """
    if section(job).instance_groups:
        raise JobError(
            [
                "sagemaker.instance_groups: the SageMaker SDK's local container mode runs one instance type "
                "(sagemaker/train/local/local_container.py); use sagemaker.instance_type with "
                "training_mode=LOCAL_CONTAINER"
            ]
        )
    return "local_gpu" if job.resources.gpus_per_node else "local"


def _compute(fields: RequestFields, local_type: str | None) -> Any:
    """ResourceConfig (and EnableManagedSpotTraining) as the SDK's Compute; local container mode has its own type."""
    _, configs, shapes, _ = _sdk()
    res = ("ResourceConfig",)
    groups = [
        shapes.InstanceGroup(
            instance_type=g["InstanceType"],
            instance_count=g["InstanceCount"],
            instance_group_name=g["InstanceGroupName"],
        )
        for g in fields.take(*res, "InstanceGroups", default=[])
    ]
    instance_type = fields.take(*res, "InstanceType")  # the launcher still sees it in sagemaker_instance_type
    return configs.Compute(
        instance_type=local_type or instance_type,
        instance_count=fields.take(*res, "InstanceCount"),
        volume_size_in_gb=fields.take(*res, "VolumeSizeInGB"),
        enable_managed_spot_training=fields.take("EnableManagedSpotTraining"),
        keep_alive_period_in_seconds=fields.take(*res, "KeepAlivePeriodInSeconds"),
        volume_kms_key_id=fields.take(*res, "VolumeKmsKeyId"),
        **({"instance_groups": groups} if groups else {}),
    )


def _networking(fields: RequestFields) -> Any:
    """VpcConfig, EnableNetworkIsolation and EnableInterContainerTrafficEncryption as the SDK's Networking."""
    _, configs, _, _ = _sdk()
    vpc = fields.take("VpcConfig", default={})
    isolation = fields.take("EnableNetworkIsolation")
    encryption = fields.take("EnableInterContainerTrafficEncryption")
    if not vpc and isolation is None and encryption is None:
        return None
    return configs.Networking(
        subnets=vpc.get("Subnets"),
        security_group_ids=vpc.get("SecurityGroupIds"),
        enable_network_isolation=isolation,
        enable_inter_container_traffic_encryption=encryption,
    )


def trainer_arguments(fields: RequestFields, local_type: str | None = None) -> dict[str, Any]:
    """ModelTrainer's constructor arguments, each from its field of the request (AT_TRAIN: set when it sends)."""
    _, configs, shapes, _ = _sdk()
    for path in AT_TRAIN:
        fields.take(*path)
    stop = ("StoppingCondition",)
    return {
        "training_image": fields.take("AlgorithmSpecification", "TrainingImage"),
        "training_input_mode": fields.take("AlgorithmSpecification", "TrainingInputMode"),
        "role": fields.take("RoleArn"),
        "compute": _compute(fields, local_type),
        "networking": _networking(fields),
        "stopping_condition": configs.StoppingCondition(
            max_runtime_in_seconds=fields.take(*stop, "MaxRuntimeInSeconds"),
            max_wait_time_in_seconds=fields.take(*stop, "MaxWaitTimeInSeconds"),
            max_pending_time_in_seconds=fields.take(*stop, "MaxPendingTimeInSeconds"),
        ),
        "output_data_config": configs.OutputDataConfig(
            s3_output_path=fields.take("OutputDataConfig", "S3OutputPath"),
            kms_key_id=fields.take("OutputDataConfig", "KmsKeyId"),
        ),
        "checkpoint_config": configs.CheckpointConfig(
            s3_uri=fields.take("CheckpointConfig", "S3Uri"), local_path=fields.take("CheckpointConfig", "LocalPath")
        ),
        "environment": fields.take("Environment"),
        "hyperparameters": fields.take("HyperParameters"),
        "tags": [shapes.Tag(key=t["Key"], value=t["Value"]) for t in fields.take("Tags")],
    }


def to_model_trainer(
    job: JobSpec, *, boto_session: boto3.Session | None = None, training_mode: Any = None, **overrides: Any
) -> Any:
    """The job as a `sagemaker.train.ModelTrainer`; `overrides` go to its constructor last.

    `training_mode=Mode.LOCAL_CONTAINER` (pass `local_container_root=` too: the SDK defaults to the working
    directory) runs the job's containers on this machine through docker compose instead of SageMaker.
    """
    job = prepare(job)  # its code bundle packed, if not yet (the request names its sha256)
    validate(job)
    job = with_instance_defaults(job)
    local_type = _local_instance_type(job) if _is_local(training_mode) else None
    _, configs, shapes, session_class = _sdk()
    request = build_request(job, training_job_name(job))
    fields = RequestFields(request, BRIDGE)
    kwargs = trainer_arguments(fields, local_type)
    retries = fields.take("RetryStrategy", "MaximumRetryAttempts")
    tensorboard = fields.take("TensorBoardOutputConfig")
    metrics = fields.take("AlgorithmSpecification", "MetricDefinitions")
    fields.finish()
    kwargs["sagemaker_session"] = session_class(**session_arguments(job, boto_session))
    if training_mode is not None:
        kwargs["training_mode"] = training_mode
    kwargs.update(overrides)
    if local_type and "checkpoint_config" not in overrides:
        # Local container mode has no checkpoint folder to sync: `_LocalContainer` takes no checkpoint
        # config and mounts only /opt/ml/model, the channels, the code and each host's input and output
        # (`_prepare_training_volumes`, `_create_docker_host`). The trainer still checkpoints to
        # /opt/ml/checkpoints inside each container, as under SDK 2's local mode (estimator.py).
        kwargs["checkpoint_config"] = None
    trainer = without_credentials_said(lambda: _trainer_class()(**kwargs))
    if retries is not None:
        trainer = trainer.with_retry_strategy(shapes.RetryStrategy(maximum_retry_attempts=retries))
    if tensorboard is not None:
        trainer = trainer.with_tensorboard_output_config(
            configs.TensorBoardOutputConfig(
                s3_output_path=tensorboard["S3OutputPath"], local_path=tensorboard["LocalPath"]
            )
        )
    if (
        metrics
    ):  # model_trainer.py with_metric_definitions (CreateTrainingJob's AlgorithmSpecification.MetricDefinitions)
        trainer = trainer.with_metric_definitions(
            [shapes.MetricDefinition(name=m["Name"], regex=m["Regex"]) for m in metrics]
        )
    trainer._trainctl_job = job
    trainer._trainctl_request = request
    return trainer


def train(job: JobSpec, boto_session: boto3.Session | None = None) -> str:
    """Create the training job through ModelTrainer, without waiting; returns its name."""
    trainer = to_model_trainer(job, boto_session=boto_session)
    try:
        trainer.train(wait=False, logs=False)
    except EngineError:
        raise
    except Exception as exc:  # the SDK raises botocore, pydantic and ValueError alike
        raise EngineError(f"create training job via the SageMaker SDK 3.x ModelTrainer: {exc}") from exc
    name: str = trainer._latest_training_job.training_job_name
    return name

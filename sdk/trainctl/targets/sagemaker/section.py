"""Knobs only the SageMaker target has."""

from __future__ import annotations

from typing import ClassVar, Literal

from pydantic import Field, field_validator

from ...spec.section import Section
from ...spec.target_section import TargetSection
from ...spec.units import DURATION_HELP, parse_duration


class InstanceGroup(Section):
    """One group of a heterogeneous cluster (ResourceConfig.InstanceGroups)."""

    name: str = Field(description="InstanceGroupName, e.g. train or data.")
    instance_type: str = Field(description='e.g. "ml.p4d.24xlarge".')
    count: int = Field(1, ge=1)
    train: bool = Field(False, description="This group runs the training (torchrun spans its hosts only).")
    channels: list[str] = Field(
        default_factory=list, description="Data inputs this group downloads (when any group names some, all must)."
    )


class SageMakerSection(TargetSection):
    """The training-job request's AWS-only parts (see docs/sagemaker.md for how each is used)."""

    code_alias: ClassVar[str | None] = "source_dir"

    role_arn: str | None = Field(None, description="Execution role, a full ARN (required to submit).")
    instance_type: str | None = Field(None, description='e.g. "ml.g5.12xlarge" (required to submit).')
    region: str | None = Field(None, description="AWS region; default: the boto3 session's.")
    volume_size_gb: int = Field(100, ge=1, le=16384)
    output_s3_uri: str | None = Field(
        None, description="s3:// prefix for model artifacts (required to submit, or set the job's output_dir)."
    )
    checkpoint_s3_uri: str | None = Field(
        None, description="s3:// prefix synced with /opt/ml/checkpoints; default <output>/<job name>/checkpoints/."
    )
    distribution: Literal["torch_distributed", "pytorchddp"] = "torch_distributed"
    container: Literal["auto", "trainctl", "toolkit"] = Field(
        "auto",
        description="How the image starts: trainctl's launcher (trainctl), or the sagemaker-training toolkit "
        "as AWS's framework images run it (toolkit); auto: toolkit for AWS's PyTorch training images.",
    )
    input_mode: Literal["File", "FastFile", "Pipe"] = Field(
        "File", description="Pipe is refused: the trainer reads files, Pipe gives FIFOs."
    )
    instance_groups: list[InstanceGroup] = Field(
        default_factory=list, description="A heterogeneous cluster instead of instance_type x resources.nodes."
    )
    keep_alive_period: str | int | None = Field(
        None, description=f"Warm pool: keep the instances this long after the job (at most 6h); {DURATION_HELP}."
    )
    max_pending_time: str | int | None = Field(
        None, description=f"Stop the job if it waits longer for capacity (2h to 28 days); {DURATION_HELP}."
    )
    output_kms_key_id: str | None = Field(None, description="KMS key for the model artifacts in S3.")
    volume_kms_key_id: str | None = Field(None, description="KMS key for the instances' storage volumes.")
    network_isolation: bool = Field(False, description="No network access from the container (EnableNetworkIsolation).")
    inter_container_encryption: bool = Field(
        False, description="Encrypt traffic between the instances (EnableInterContainerTrafficEncryption)."
    )
    tensorboard_s3_uri: str | None = Field(None, description="s3:// prefix the TensorBoard events are synced to.")
    container_log_level: int = Field(20, description="sagemaker_container_log_level for toolkit images (20: INFO).")
    max_wait: str | int | None = Field(None, description=f"Managed spot: total wait incl. runtime; {DURATION_HELP}.")
    subnets: list[str] = Field(default_factory=list, description="VPC subnets (with security_group_ids).")
    security_group_ids: list[str] = Field(default_factory=list, description="VPC security groups.")
    tags: dict[str, str] = Field(default_factory=dict, description="Tags on the training job.")
    source_dir: str | None = Field(
        None, description="Deprecated alias of the job-level `code: <dir>` (kept working; prefer `code:`)."
    )
    entry_point: str | None = Field(
        None, description="Script inside source_dir (sagemaker_program); default: the command's script."
    )
    code_s3_prefix: str | None = Field(None, description="Where the source tarball goes; default under output.")

    @field_validator("max_wait", "keep_alive_period", "max_pending_time")
    @classmethod
    def _max_wait_parses(cls, value: str | int | None) -> str | int | None:
        if value is not None:
            parse_duration(value)
        return value

    @property
    def max_wait_seconds(self) -> int | None:
        return parse_duration(self.max_wait) if self.max_wait is not None else None

    @property
    def keep_alive_seconds(self) -> int | None:
        return parse_duration(self.keep_alive_period) if self.keep_alive_period is not None else None

    @property
    def max_pending_seconds(self) -> int | None:
        return parse_duration(self.max_pending_time) if self.max_pending_time is not None else None

    def required_for_submit(self) -> list[str]:
        needed = ("role_arn",) if self.instance_groups else ("role_arn", "instance_type")
        missing = [f for f in needed if getattr(self, f) is None]
        return [f"sagemaker.{f}: required to submit to SageMaker" for f in missing]

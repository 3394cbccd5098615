"""Knobs only the SageMaker target has."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, field_validator

from ...section import Section
from ...units import DURATION_HELP, parse_duration


class SageMakerSection(Section):
    """The training-job request's AWS-only parts (see docs/sagemaker.md for how each is used)."""

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
    input_mode: Literal["File", "FastFile", "Pipe"] = "File"
    max_wait: str | int | None = Field(None, description=f"Managed spot: total wait incl. runtime; {DURATION_HELP}.")
    subnets: list[str] = Field(default_factory=list)
    security_group_ids: list[str] = Field(default_factory=list)
    tags: dict[str, str] = Field(default_factory=dict)
    source_dir: str | None = Field(None, description="Local code folder packed to S3 for command jobs.")
    entry_point: str | None = Field(
        None, description="Script inside source_dir (sagemaker_program); default: the command's script."
    )
    code_s3_prefix: str | None = Field(None, description="Where the source tarball goes; default under output.")

    @field_validator("max_wait")
    @classmethod
    def _max_wait_parses(cls, value: str | int | None) -> str | int | None:
        if value is not None:
            parse_duration(value)
        return value

    @property
    def max_wait_seconds(self) -> int | None:
        return parse_duration(self.max_wait) if self.max_wait is not None else None

    def required_for_submit(self) -> list[str]:
        missing = [f for f in ("role_arn", "instance_type") if getattr(self, f) is None]
        return [f"sagemaker.{f}: required to submit to SageMaker" for f in missing]

"""What `submit` takes for SageMaker beyond the job (`-O key=value`, or the Python API's keywords)."""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from pydantic import Field

from ..base import SubmitOptions


class SageMakerOptions(SubmitOptions):
    via: Literal["direct", "sdk", "estimator", "model_trainer"] = Field(
        "direct",
        description="direct: boto3 sends the rendered request; estimator: SageMaker SDK 2.x; model_trainer: "
        "SDK 3.x (ModelTrainer); sdk: whichever of the two is installed.",
    )
    now: datetime | None = Field(None, description="The clock for the training job's name (tests).")
    boto_session: Any = Field(None, description="A boto3.Session to use instead of a new one (Python API only).")
    local: bool = Field(
        False,
        description="Run the rendered request here as containers algo-1..N of the job's image (podman), "
        "not on AWS (`trainctl submit -O local=true`; docs/sagemaker.md).",
    )

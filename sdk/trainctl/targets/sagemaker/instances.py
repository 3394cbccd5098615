"""A small table of common SageMaker training instance types: GPUs, vCPUs, memory, hourly price.

Used to validate a job before it is sent (does the instance exist, does it have the GPUs the job
asks for) and for the cost line `render` prints. Prices are approximate on-demand list prices for
SageMaker training in us-east-1 (USD per instance-hour), for orientation only: other regions,
savings plans and spot differ. Add a row here to allow another type.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class InstanceType:
    """One `ml.*` training instance type."""

    name: str
    gpus: int
    vcpus: int
    memory_gib: int
    gpu_model: str
    usd_per_hour: float


_ROWS: tuple[tuple[str, int, int, int, str, float], ...] = (
    # CPU
    ("ml.m5.large", 0, 2, 8, "", 0.115),
    ("ml.m5.xlarge", 0, 4, 16, "", 0.23),
    ("ml.m5.2xlarge", 0, 8, 32, "", 0.461),
    ("ml.m5.4xlarge", 0, 16, 64, "", 0.922),
    ("ml.m5.12xlarge", 0, 48, 192, "", 2.765),
    ("ml.m5.24xlarge", 0, 96, 384, "", 5.53),
    ("ml.c5.xlarge", 0, 4, 8, "", 0.204),
    ("ml.c5.2xlarge", 0, 8, 16, "", 0.408),
    ("ml.c5.4xlarge", 0, 16, 32, "", 0.816),
    ("ml.c5.9xlarge", 0, 36, 72, "", 1.836),
    ("ml.c5.18xlarge", 0, 72, 144, "", 3.672),
    # GPU
    ("ml.g4dn.xlarge", 1, 4, 16, "T4", 0.736),
    ("ml.g4dn.12xlarge", 4, 48, 192, "T4", 4.89),
    ("ml.g5.xlarge", 1, 4, 16, "A10G", 1.408),
    ("ml.g5.2xlarge", 1, 8, 32, "A10G", 1.515),
    ("ml.g5.12xlarge", 4, 48, 192, "A10G", 7.09),
    ("ml.g5.48xlarge", 8, 192, 768, "A10G", 20.36),
    ("ml.g6.xlarge", 1, 4, 16, "L4", 1.006),
    ("ml.g6.12xlarge", 4, 48, 192, "L4", 5.491),
    ("ml.g6e.xlarge", 1, 4, 32, "L40S", 2.338),
    ("ml.g6e.12xlarge", 4, 48, 384, "L40S", 13.117),
    ("ml.p3.2xlarge", 1, 8, 61, "V100", 3.825),
    ("ml.p3.8xlarge", 4, 32, 244, "V100", 14.688),
    ("ml.p3.16xlarge", 8, 64, 488, "V100", 28.152),
    ("ml.p4d.24xlarge", 8, 96, 1152, "A100-40GB", 37.688),
    ("ml.p4de.24xlarge", 8, 96, 1152, "A100-80GB", 47.11),
    ("ml.p5.48xlarge", 8, 192, 2048, "H100", 113.07),
)

INSTANCE_TYPES: dict[str, InstanceType] = {row[0]: InstanceType(*row) for row in _ROWS}


def lookup(name: str) -> InstanceType | None:
    """The row for `name`, or None when the table does not know it."""
    return INSTANCE_TYPES.get(name)

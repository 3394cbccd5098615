"""One section per target: the only place target-specific knobs live."""

from .base import Section
from .kubernetes import KubernetesSection
from .local import LocalSection
from .sagemaker import SageMakerSection
from .slurm import SlurmSection

__all__ = ["KubernetesSection", "LocalSection", "SageMakerSection", "Section", "SlurmSection"]

"""trainctl: define a PyTorch distributed training job once, run it locally, on SLURM, Kubernetes or SageMaker."""

from .errors import EngineError, JobError, TrainctlError
from .job import Job, Resources, TrainerConfig
from .run import Run, RunState, RunStatus
from .version import __version__

__all__ = [
    "EngineError",
    "Job",
    "JobError",
    "Resources",
    "Run",
    "RunState",
    "RunStatus",
    "TrainctlError",
    "TrainerConfig",
    "__version__",
]

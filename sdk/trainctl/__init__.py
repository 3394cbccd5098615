"""trainctl: define a PyTorch distributed training job once, run it locally, on SLURM, Kubernetes or SageMaker.

The public names are loaded on first use (PEP 562), so `trainctl --help` and `trainctl list`, which
need no Job model, do not pay for pydantic and the job sections (~0.3 s; docs/benchmarks.md).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from .version import __version__

if TYPE_CHECKING:
    from .errors import EngineError, JobError, TrainctlError
    from .job import Job
    from .run import Run, RunFailed
    from .runs.state import RunState, RunStatus
    from .spec.resources import Resources
    from .spec.trainer import TrainerConfig

_WHERE = {
    "EngineError": "errors",
    "JobError": "errors",
    "TrainctlError": "errors",
    "Job": "job",
    "Resources": "spec.resources",
    "TrainerConfig": "spec.trainer",
    "Run": "run",
    "RunFailed": "run",
    "RunState": "runs.state",
    "RunStatus": "runs.state",
}


def __getattr__(name: str) -> Any:
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module 'trainctl' has no attribute {name!r}")
    value = getattr(importlib.import_module(f".{module}", __name__), name)
    globals()[name] = value  # later look-ups skip this function
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *_WHERE])


__all__ = [
    "EngineError",
    "Job",
    "JobError",
    "Resources",
    "Run",
    "RunFailed",
    "RunState",
    "RunStatus",
    "TrainctlError",
    "TrainerConfig",
    "__version__",
]

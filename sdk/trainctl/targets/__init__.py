"""One package per target (`targets/<name>/`), each with render / submit / status / logs / cancel (see base.py)."""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any, cast

from ..errors import JobError

if TYPE_CHECKING:
    from ..job import Job
    from ..run import Run
    from .base import TargetModule

_MODULES = {"local": "local", "slurm": "slurm", "kubernetes": "kubernetes", "sagemaker": "sagemaker"}


def get_target(name: str) -> TargetModule:
    """The target module by name (imported on first use, so unused targets cost nothing)."""
    if name not in _MODULES:
        from ..errors import did_you_mean

        raise JobError([f"target: got {name!r}{did_you_mean(name, _MODULES)}; expected one of {', '.join(_MODULES)}"])
    return cast("TargetModule", importlib.import_module(f"{__name__}.{_MODULES[name]}.target"))


def submit(job: Job, target: str, **options: Any) -> Run:
    """Validate for the target, submit, and record the run in the registry."""
    from ..registry import Registry

    module = get_target(target)
    job.check_target(target)
    run = module.submit(job, **options)
    Registry().record(run)
    return run

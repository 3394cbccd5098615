"""What a target plug-in imports, all from one module: `from trainctl.targets.api import ...`.

The names live where they belong (the section's base with the spec, the handle and run states with the run
records, `Target` with the targets); this module only gathers them for a plug-in's author
(docs/architecture.md, "Adding a fifth target"). Each name is imported when it is first asked for (PEP 562's
module `__getattr__`): trainctl imports every plug-in's declaration while it builds `JobSpec`, and a
declaration that writes `from trainctl.targets.api import TargetPlugin, TargetSection` must load neither
`JobSpec` (a circle) nor the run records and `Target` (which `validate` and `render` never need).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

_HOME = {
    # the declaration (`trainctl_x/__init__.py`)
    "TargetPlugin": "trainctl.targets.plugin",
    "TargetSection": "trainctl.spec.target_section",
    "JobShape": "trainctl.spec.target_section",
    "TargetHandle": "trainctl.runs.state",
    # the target and its engine
    "Target": "trainctl.targets.base",
    "SubmitOptions": "trainctl.targets.base",
    "NoOptions": "trainctl.targets.base",
    "Rendered": "trainctl.targets.base",
    "Engine": "trainctl.targets.engine_contract",
    "JobSpec": "trainctl.spec.job_spec",
    "JobError": "trainctl.errors",
    "RunRef": "trainctl.runs.state",
    "RunState": "trainctl.runs.state",
    "RunStatus": "trainctl.runs.state",
    "Paths": "trainctl.runs.state",
    "state_dir": "trainctl.runs.store",
    # how the trainer starts, as on every built-in target
    "launcher_argv": "trainctl.targets.program",
    "program_argv": "trainctl.targets.program",
    "data_env": "trainctl.targets.program",
}
__all__ = [
    "Engine",
    "JobError",
    "JobShape",
    "JobSpec",
    "NoOptions",
    "Paths",
    "Rendered",
    "RunRef",
    "RunState",
    "RunStatus",
    "SubmitOptions",
    "Target",
    "TargetHandle",
    "TargetPlugin",
    "TargetSection",
    "data_env",
    "launcher_argv",
    "program_argv",
    "state_dir",
]


def __getattr__(name: str) -> Any:
    """`name` from its home module, imported now (and kept, so the next lookup is a plain attribute)."""
    try:
        home = _HOME[name]
    except KeyError:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}") from None
    value = getattr(importlib.import_module(home), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return __all__


if TYPE_CHECKING:  # what type checkers and editors see; nothing runs here
    from ..errors import JobError
    from ..runs.state import Paths, RunRef, RunState, RunStatus, TargetHandle
    from ..runs.store import state_dir
    from ..spec.job_spec import JobSpec
    from ..spec.target_section import JobShape, TargetSection
    from .base import NoOptions, Rendered, SubmitOptions, Target
    from .engine_contract import Engine
    from .plugin import TargetPlugin
    from .program import data_env, launcher_argv, program_argv

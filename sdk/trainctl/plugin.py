"""What a target package declares to plug into trainctl: its section, its handle, where its `Target` is.

Its `trainctl.targets` entry point names one `TargetPlugin` (registry.py finds them). Pure data.
"""

from __future__ import annotations

from dataclasses import dataclass

from .run_state import RunHandle
from .section import TargetSection


@dataclass(frozen=True)
class TargetPlugin:
    """What a target package declares through its entry point (`name = "package:PLUGIN"`).

    Importing the module that holds it must load nothing but the section and the handle (pure data):
    the spec loads every plug-in when it builds its fields."""

    section: type[TargetSection]
    """The job's section of the same name (`slurm:`), every field typed and described."""
    handle: type[RunHandle]
    """What the target records to find one of its runs again (a SLURM job's shell, a pod's namespace)."""
    target: str
    """`module:attribute` of the `Target` instance (targets/base.py), imported on first use."""

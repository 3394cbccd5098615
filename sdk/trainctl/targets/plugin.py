"""What a target package declares to plug into trainctl: its section, its handle, where its `Target` is.

Its `trainctl.targets` entry point names one `TargetPlugin` (targets/registry.py finds them). Pure data.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from ..spec.target_section import TargetSection

if TYPE_CHECKING:
    from ..runs.state import RunHandle


@dataclass(frozen=True)
class TargetPlugin:
    """What a target package declares through its entry point (`name = "package:PLUGIN"`).

    Importing the module that holds it must load nothing but the section (pure data): the spec loads every
    plug-in when it builds its fields, for every check and render; the handle is named, and loaded with the run
    records when a run is recorded or read (registry.handle_type)."""

    section: type[TargetSection]
    """The job's section of the same name (`slurm:`), every field typed and described."""
    handle: type[RunHandle] | str
    """What the target records to find one of its runs again (a SLURM job's shell, a pod's namespace): the class,
    or `module:Class`, imported on first use (trainctl's own targets do this, so `trainctl validate` and
    `render` load no run records)."""
    target: str
    """`module:attribute` of the `Target` instance (targets/base.py), imported on first use."""

"""The local target: section.py (its knobs), handle.py (what its runs record), render.py (pure), engine.py (I/O),
target.py (the interface). `PLUGIN` is what its `trainctl.targets` entry point names (trainctl/targets/registry.py):
importing this package loads the section only (the handle is named, and loaded when a run is
recorded or read)."""

from ..plugin import TargetPlugin
from .section import LocalSection

PLUGIN = TargetPlugin(
    section=LocalSection,
    handle="trainctl.targets.local.handle:LocalHandle",
    target="trainctl.targets.local.target:TARGET",
)

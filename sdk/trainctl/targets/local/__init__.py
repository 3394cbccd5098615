"""The local target: section.py (its knobs), handle.py (what its runs record), render.py (pure), engine.py (I/O),
target.py (the interface). `PLUGIN` is what its `trainctl.targets` entry point names (trainctl/registry.py):
importing this package loads the section and the handle only."""

from ...plugin import TargetPlugin
from .handle import LocalHandle
from .section import LocalSection

PLUGIN = TargetPlugin(section=LocalSection, handle=LocalHandle, target="trainctl.targets.local.target:TARGET")

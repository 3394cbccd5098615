"""The slurm target: section.py (its knobs), handle.py (what its runs record), render.py (pure), engine.py (I/O),
target.py (the interface). `PLUGIN` is what its `trainctl.targets` entry point names (trainctl/registry.py):
importing this package loads the section and the handle only."""

from ...plugin import TargetPlugin
from .handle import SlurmHandle
from .section import SlurmSection

PLUGIN = TargetPlugin(section=SlurmSection, handle=SlurmHandle, target="trainctl.targets.slurm.target:TARGET")

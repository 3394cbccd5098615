"""A toy trainctl target, as another package would write one: the section and the handle are declared here
(importing this loads nothing else); the Target is loaded by name when a run is rendered or submitted."""

from trainctl.targets.api import TargetPlugin

from .handle import ToyHandle
from .section import ToySection

PLUGIN = TargetPlugin(section=ToySection, handle=ToyHandle, target="trainctl_toy.target:TARGET")

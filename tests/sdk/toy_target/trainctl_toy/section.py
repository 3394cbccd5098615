"""The job's `toy:` section."""

from __future__ import annotations

from pydantic import Field
from trainctl.targets.api import TargetSection


class ToySection(TargetSection):
    """Knobs only the toy target has."""

    greeting: str = Field("hello", description="Printed before the program starts (TOY_GREETING).")

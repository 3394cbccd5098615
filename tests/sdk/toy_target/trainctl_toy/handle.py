"""What a toy run records to be found again."""

from __future__ import annotations

from trainctl.targets.api import TargetHandle


class ToyHandle(TargetHandle):
    pid: int | None = None
    shell: str = "sh"

"""A `command:` job's hang rule (`hang:`), as the launcher judges it from the workers' output lines. Pure data."""

from __future__ import annotations

import re

from pydantic import Field, field_validator

from .section import Section
from .units import DURATION_HELP, parse_duration


class Hang(Section):
    """A `command:` job's hang rule, judged by the launcher on each node from its workers' output lines
    (SageMaker HyperPod's `JobHangingDetection` log rule; docs/reliability.md says what it can see)."""

    quiet_for: str | int = Field(..., description=f"A hang: no progress line for this long; {DURATION_HELP}.")
    progress: str | None = Field(
        None, description="A Python regex a progress line matches (searched); default: any line."
    )
    start_within: str | int | None = Field(
        None, description="Also a hang: no progress line this long after the start (only if every node prints them)."
    )

    @field_validator("quiet_for", "start_within")
    @classmethod
    def _duration(cls, value: str | int | None) -> str | int | None:
        if value is not None:
            parse_duration(value)
        return value

    @field_validator("progress")
    @classmethod
    def _regex(cls, value: str | None) -> str | None:
        if value is not None:
            try:
                re.compile(value)
            except re.error as exc:
                raise ValueError(f"not a Python regular expression: {exc}") from None
        return value

    def launcher_flags(self) -> list[str]:
        """The launcher's `--hang-*` options (docs/contracts.md section 1)."""
        flags = ["--hang-quiet-for", str(parse_duration(self.quiet_for))]
        if self.progress is not None:
            flags += ["--hang-progress", self.progress]
        if self.start_within is not None:
            flags += ["--hang-start-within", str(parse_duration(self.start_within))]
        return flags

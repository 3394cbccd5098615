"""The strict base every part of a job file uses: unknown keys are errors, not silently dropped."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class Section(BaseModel):
    """A part of the job spec. Frozen so a rendered job cannot change under its artifact."""

    # allow_inf_nan=False: `.inf`/`.nan` in YAML would reach the trainer as "inf" and JSON as Infinity
    # strict=True: a scalar takes only its own type (YAML gives real types): `true` is not 1, "2" is not 2.
    model_config = ConfigDict(extra="forbid", frozen=True, validate_default=True, allow_inf_nan=False, strict=True)

    def required_for_submit(self) -> list[str]:
        """Problems that only matter when submitting to this section's target (empty: ready)."""
        return []

"""Knobs only the local target has."""

from __future__ import annotations

from pydantic import Field

from ...section import Section


class LocalSection(Section):
    """Running on this machine, as a detached process group."""

    python: str | None = Field(
        None, description="Python interpreter that has the trainer installed; default: the one running trainctl."
    )
    workdir: str | None = Field(None, description="Working directory of the run; default: the job file's folder.")

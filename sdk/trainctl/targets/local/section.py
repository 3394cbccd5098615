"""Knobs only the local target has."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from ...spec.target_section import TargetSection


class LocalSection(TargetSection):
    """Running on this machine, as a detached process group."""

    python: str | None = Field(
        None, description="Python interpreter that has the trainer installed; default: the one running trainctl."
    )
    workdir: str | None = Field(None, description="Working directory of the run; default: the job file's folder.")
    container: Literal["podman", "docker"] | None = Field(
        None,
        description=(
            "Run the job's image in a container with this engine (data read-only, output and checkpoints "
            "mounted; user 10001, read-only root filesystem) instead of processes of a local Python; "
            "the image must be on this machine (scripts/image.sh build --flavor cpu)."
        ),
    )

"""What a SLURM run records to be found again: the shell its commands go through, and its files."""

from __future__ import annotations

from pydantic import Field

from ...runs.state import TargetHandle


class SlurmHandle(TargetHandle):
    """How to reach the job's cluster (here, or ssh to `slurm.login`) and where its script is."""

    prefix: tuple[str, ...] = Field((), description="The ssh command to the login host; empty: here.")
    login: str | None = None
    workdir: str | None = Field(None, description="The shared workdir the script and the run folders are in.")
    script: str | None = None
    container: str | None = Field(None, description="slurm.container (podman: its nodes report image IDs).")

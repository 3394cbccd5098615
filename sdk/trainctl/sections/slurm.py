"""Knobs only the SLURM target has."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from .base import Section


class SlurmSection(Section):
    """sbatch options and the runtime that starts the trainer on each node."""

    partition: str | None = None
    account: str | None = None
    qos: str | None = None
    constraint: str | None = None
    exclusive: bool = False
    container: Literal["none", "pyxis", "apptainer"] = Field(
        "none", description="How the trainer runs on a node: a Python environment, pyxis/enroot, or apptainer."
    )
    python_env: str | None = Field(
        None, description="container: none - a virtualenv or conda prefix on the cluster (its bin/ goes on PATH)."
    )
    container_mounts: list[str] = Field(default_factory=list, description="SRC:DST[:FLAGS] bind mounts.")
    workdir: str | None = Field(None, description="Shared directory for the script, logs and outputs.")
    extra_sbatch: list[str] = Field(default_factory=list, description='Extra lines, e.g. "--reservation=big".')
    preemption: bool = Field(False, description="Signal USR1 before the time limit and --requeue.")
    signal_grace_s: int = Field(120, ge=10, le=3600, description="Seconds before the end the signal is sent.")
    gpu_directive: Literal["gpus-per-node", "gres"] = "gpus-per-node"
    secrets_dir: str | None = Field(
        None, description="Directory on the cluster holding one file per secret name (read at run time)."
    )
    login: str | None = Field(None, description="ssh host to run sbatch/squeue/scancel on; default: here.")
    ssh_options: list[str] = Field(default_factory=list)

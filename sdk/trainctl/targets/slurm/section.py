"""Knobs only the SLURM target has.

Values that land on `#SBATCH` lines are checked here: a newline there would start a shell line
of the batch script, so those fields accept only the characters SLURM itself uses.
"""

from __future__ import annotations

import re
from typing import Literal

from pydantic import Field, field_validator

from ...errors import FieldProblem
from ...spec.target_section import JobShape, TargetSection

_NAME_LIST = re.compile(r"^[A-Za-z0-9_.-]+(,[A-Za-z0-9_.-]+)*$")
_CONSTRAINT = re.compile(r"^[A-Za-z0-9_.,&|*\[\]():!-]+$")
_SBATCH_OPTION = re.compile(r"^--?[A-Za-z][A-Za-z0-9-]*(=[\x21-\x7e][\x20-\x7e]*)?$")
_LOGIN = re.compile(r"^[A-Za-z0-9_.@:-]+$")


def _no_control(value: str, what: str) -> str:
    if not value or any(ord(c) < 32 or ord(c) == 127 for c in value):
        raise ValueError(f"expected a non-empty {what} without newlines or control characters")
    return value


class SlurmSection(TargetSection):
    """sbatch options and the runtime that starts the trainer on each node."""

    partition: str | None = Field(None, description="Partition name, or a comma-separated list.")
    account: str | None = None
    qos: str | None = None
    constraint: str | None = Field(None, description='Node features, e.g. "a100&ib".')
    exclusive: bool = Field(False, description="Whole nodes only (sbatch --exclusive).")
    container: Literal["none", "pyxis", "apptainer", "podman"] = Field(
        "none",
        description="How the trainer runs on a node: a Python environment, pyxis/enroot, apptainer, or podman "
        "(one `podman run` of the job's image per node under srun: user 10001, read-only root, host network).",
    )
    launch: Literal["torchrun", "srun"] = Field(
        "torchrun",
        description="torchrun: srun starts the launcher once per node, which starts torchrun; srun: srun starts every "
        "process as a task of its own (--ntasks-per-node = procs_per_node, a GPU bound to each), no torchrun.",
    )
    python_env: str | None = Field(
        None, description="container: none - a virtualenv or conda prefix on the cluster (its bin/ goes on PATH)."
    )
    container_mounts: list[str] = Field(default_factory=list, description="SRC:DST[:FLAGS] bind mounts.")
    workdir: str | None = Field(
        None,
        description="Shared directory for the script, logs, checkpoints and outputs; default: slurm-runs/<job name> "
        "(relative paths: from the job file's folder, or the submit directory).",
    )
    data_cache: str | None = Field(
        None,
        description="Shared directory where s3:// data inputs are staged, once, by one node under a lock; default: "
        "<workdir>/data-cache (name one folder in several jobs to share their copies).",
    )
    extra_sbatch: list[str] = Field(default_factory=list, description='Extra lines, e.g. "--reservation=big".')
    preemption: bool = Field(
        False, description="Signal USR1 before the time limit, checkpoint, and requeue the job (--requeue)."
    )
    signal_grace_s: int = Field(120, ge=10, le=3600, description="Seconds before the end the signal is sent.")
    gpu_directive: Literal["gpus-per-node", "gres"] = "gpus-per-node"
    secrets_dir: str | None = Field(
        None, description="Directory on the cluster holding one file per secret name (read at run time)."
    )
    login: str | None = Field(None, description="ssh host to run sbatch/squeue/scancel on; default: here.")
    ssh_options: list[str] = Field(default_factory=list, description='Extra ssh arguments, e.g. ["-p", "2222"].')
    ssh_command: list[str] = Field(
        default_factory=lambda: ["ssh", "-o", "BatchMode=yes"],
        description="The ssh client argv used with `login` (a wrapper script works too).",
    )

    @field_validator("partition", "account", "qos")
    @classmethod
    def _slurm_names(cls, value: str | None) -> str | None:
        if value is not None and not _NAME_LIST.match(value):
            raise ValueError("expected SLURM names: letters, digits, _ . - (comma-separated for several)")
        return value

    @field_validator("constraint")
    @classmethod
    def _constraint(cls, value: str | None) -> str | None:
        if value is not None and not _CONSTRAINT.match(value):
            raise ValueError('expected a SLURM feature expression such as "a100&ib" or "[rack1|rack2]" (no spaces)')
        return value

    @field_validator("extra_sbatch")
    @classmethod
    def _sbatch_options(cls, value: list[str]) -> list[str]:
        for item in value:
            if not _SBATCH_OPTION.match(item):
                raise ValueError(
                    f"{item!r}: expected one sbatch option such as '--reservation=big' "
                    "(starts with -, printable characters only, no newlines)"
                )
        return value

    @field_validator("python_env", "workdir", "secrets_dir", "data_cache")
    @classmethod
    def _paths(cls, value: str | None) -> str | None:
        if value is None:
            return None
        if "%" in value:
            raise ValueError("must not contain '%' (SLURM reads %j, %u... in log paths as patterns)")
        return _no_control(value, "path")

    @field_validator("container_mounts")
    @classmethod
    def _mounts(cls, value: list[str]) -> list[str]:
        for item in value:
            _no_control(item, "mount")
            if "," in item or ":" not in item:
                raise ValueError(f"{item!r}: expected SRC:DST[:FLAGS] with no commas")
        return value

    @field_validator("login")
    @classmethod
    def _login_host(cls, value: str | None) -> str | None:
        if value is not None and (value.startswith("-") or not _LOGIN.match(value)):
            raise ValueError('expected an ssh destination such as "login.cluster" or "me@login" (not an option)')
        return value

    @field_validator("ssh_command")
    @classmethod
    def _ssh_command(cls, value: list[str]) -> list[str]:
        if not value or not value[0].strip():
            raise ValueError("must be a non-empty argv whose first item is the ssh program")
        return value

    def problem_with(self, job: JobShape) -> FieldProblem | None:
        """`launch: srun` starts every process as a SLURM task: no torchrun to restart or admit workers, no
        per-node launcher of the user's, one GPU bound to each task."""
        if self.launch != "srun":
            return None
        res = job.resources
        if job.launch == "per_node":
            return FieldProblem(
                "slurm.launch",
                "slurm.launch: srun starts one task per process, launch: per_node your launcher once per node: "
                "choose one",
            )
        if res.elastic is not None or res.max_restarts:
            field = "resources.elastic" if res.elastic is not None else "resources.max_restarts"
            return FieldProblem(
                field,
                "slurm.launch: srun starts every process as a SLURM task, with no torchrun to admit nodes "
                "elastically or restart workers; use retries: (the job is requeued) or slurm.launch: torchrun",
            )
        if res.gpus_per_node and res.gpus_per_node != res.nprocs:
            return FieldProblem(
                "resources.procs_per_node",
                f"slurm.launch: srun binds one GPU to each task: procs_per_node ({res.nprocs}) must equal "
                f"gpus_per_node ({res.gpus_per_node})",
            )
        return None

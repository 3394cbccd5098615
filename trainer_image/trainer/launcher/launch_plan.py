"""What the launcher runs on one node, as data: its options (the command line) and its plan (platforms.py and
launch_modes.py build it from the environment; launch.py carries it out)."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

DEFAULT_MASTER_PORT = 29500
FORWARDED_SIGNALS = "SIGTERM,SIGINT,SIGHUP,SIGQUIT,SIGUSR1"
"""torchrun's default signals plus SIGUSR1 (SLURM's warning before the time limit): the agent passes them on."""
GPUS_ASKED_ENV = "TRAINCTL_GPUS_PER_NODE"
"""The GPUs per node the job asked for, where no scheduler made sure of them (the local target sets it)."""


def gpu_warning(environ: Mapping[str, str], visible: Callable[[], int], nproc: int) -> str | None:
    """The launcher's loud line when this node shows fewer GPUs than the job asked for (GPUS_ASKED_ENV): the
    trainer's backend `auto` then trains on CPU with gloo (or the processes share the GPUs), else unsaid.
    `visible` (it imports torch) is asked only when the job asked for GPUs."""
    asked = environ.get(GPUS_ASKED_ENV, "")
    wanted = int(asked) if asked.isdigit() else 0
    shown = visible() if wanted else 0
    if shown >= wanted:
        return None
    then = "training runs on CPU with gloo" if shown == 0 else f"the {nproc} process(es) share them"
    return f"WARNING: the job asks for {wanted} GPU(s) per node and this node shows {shown}: {then}"


@dataclass(frozen=True)
class LaunchOptions:
    """The launcher's command line (docs/contracts.md section 1)."""

    program: list[str] = field(default_factory=list)
    nproc_per_node: int | None = None
    nnodes: str | None = None
    max_restarts: int = 0
    master_port: int | None = None
    rdzv_backend: str | None = None
    master_wait: float = 300.0
    platform: str = "auto"  # "local": ignore the platform variables (PLATFORM_PREFIXES, PLATFORM_KEYS)
    workdir: str | None = None  # created, then the program's working directory (a code bundle unpacks into it)
    launch: str = "torchrun"  # launch_modes.MODES: torchrun here, one srun task per process, or per_node
    hang_quiet_for: float | None = None  # a `command:` job's hang rule (trainer/launcher/quiet.py)
    hang_progress: str | None = None
    hang_start_within: float | None = None
    data_cache: str | None = None  # s3:// inputs (TRAINER_DATA_*) are staged here before the workers start
    output_s3: str | None = None  # node 0 uploads the output folder here at the end of the attempt


@dataclass
class LaunchPlan:
    """What to run on this node. `mode` is `torchrun`; `direct` (already a torchrun worker), `srun` (one SLURM
    task per process) or `per_node` (the user's launcher): the program itself with `env`; or `process` (once,
    without torchrun: a SageMaker host outside the distribution groups)."""

    platform: str
    mode: str
    program: list[str]
    nnodes: str = "1"
    nproc_per_node: int = 1
    node_rank: int | None = None
    master_addr: str | None = None
    master_port: int | None = None
    rdzv_backend: str = "static"
    rdzv_endpoint: str | None = None
    rdzv_id: str | None = None
    standalone: bool = False
    max_restarts: int = 0
    env: dict[str, str] = field(default_factory=dict)
    cwd: str | None = None
    unpack: list[tuple[str, str]] = field(default_factory=list)
    local_code: str | None = None  # a code folder used as it is (SageMaker local code), not a tarball
    failure_file: str | None = None
    wait_for: tuple[str, int] | None = None
    hosts: list[str] = field(default_factory=list)  # the nodes' addresses, where the platform names them
    unset: list[str] = field(default_factory=list)  # removed from the environment before `env` is applied
    worker_prefix: list[str] = field(default_factory=list)  # each torchrun worker runs this, then the program

    def torchrun_args(self) -> list[str]:
        """Arguments for `torchrun` (torch.distributed.run), ending in `--no-python PROGRAM...`."""
        args = [
            f"--nproc-per-node={self.nproc_per_node}",
            f"--max-restarts={self.max_restarts}",
            # the agent passes these on to the workers (who checkpoint) instead of dying on SIGUSR1
            f"--signals-to-handle={FORWARDED_SIGNALS}",
        ]
        if self.standalone:
            args += ["--standalone", f"--nnodes={self.nnodes}"]
        elif self.rdzv_backend == "static":
            args += [
                f"--nnodes={self.nnodes}",
                f"--node-rank={self.node_rank or 0}",
                f"--master-addr={self.master_addr}",
                f"--master-port={self.master_port}",
            ]
            if self.rdzv_id:
                args.append(f"--rdzv-id={self.rdzv_id}")
        else:
            args += [
                f"--nnodes={self.nnodes}",
                f"--rdzv-backend={self.rdzv_backend}",
                f"--rdzv-endpoint={self.rdzv_endpoint}",
                f"--rdzv-id={self.rdzv_id or 'trainctl'}",
            ]
        return [*args, "--no-python", *self.worker_prefix, *self.program]

    def to_json(self) -> dict[str, Any]:
        data = dataclasses.asdict(self)
        data["torchrun_args"] = self.torchrun_args() if self.mode == "torchrun" else None
        return data

"""Process-group setup and the clean teardown torch 2.13 needs to exit without aborting."""

from __future__ import annotations

import gc
import os
import socket
from dataclasses import dataclass
from datetime import timedelta

import torch
import torch.distributed as dist

from .. import failpoints
from ..errors import TrainerInputError


@dataclass(frozen=True)
class DistInfo:
    rank: int
    local_rank: int
    world_size: int
    device: torch.device
    backend: str


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def init(backend: str, timeout_s: int) -> DistInfo:
    """Join the process group torchrun describes in the environment (or a group of one)."""
    if "RANK" not in os.environ or "WORLD_SIZE" not in os.environ:
        # Plain `python -m trainer.train`: a one-process group keeps a single code path.
        os.environ.update(
            {"RANK": "0", "LOCAL_RANK": "0", "WORLD_SIZE": "1", "LOCAL_WORLD_SIZE": "1",
             "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(_free_port())}
        )  # fmt: skip
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    cuda = torch.cuda.is_available()
    if backend == "auto":
        backend = "nccl" if cuda else "gloo"
    if backend == "nccl" and not cuda:
        raise TrainerInputError("config field 'backend': nccl needs CUDA, and no GPU is visible; use gloo or auto")
    device = torch.device("cpu")
    if cuda:
        # srun with --gpus-per-task=1 shows each task only its own GPU (index 0); torchrun shows them all
        index = local_rank % torch.cuda.device_count()
        torch.cuda.set_device(index)
        device = torch.device("cuda", index)
    timeout = timedelta(seconds=timeout_s)
    store: dist.Store | None = None
    if os.environ.get("TORCHELASTIC_USE_AGENT_STORE") == "True":
        # torchrun reuses its store across restarts; without a per-attempt prefix a restarted
        # worker can read a dead peer's gloo address and fail (or hang) in connectFullMesh.
        attempt = os.environ.get("TORCHELASTIC_RESTART_COUNT", "0")
        agent_store = dist.TCPStore(
            os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]), world, is_master=False, timeout=timeout
        )
        store = dist.PrefixStore(f"/trainer/attempt_{attempt}", agent_store)
    dist.init_process_group(
        backend=backend,
        store=store,
        rank=rank if store is not None else -1,
        world_size=world if store is not None else -1,
        timeout=timeout,
        device_id=device if backend == "nccl" else None,
    )
    return DistInfo(rank, local_rank, world, device, backend)


def all_reduce_max(values: list[float], device: torch.device) -> list[float]:
    t = torch.tensor(values, dtype=torch.float64, device=device)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return [float(v) for v in t.tolist()]


def all_reduce_sum(values: list[float], device: torch.device) -> list[float]:
    t = torch.tensor(values, dtype=torch.float64, device=device)
    dist.all_reduce(t, op=dist.ReduceOp.SUM)
    return [float(v) for v in t.tolist()]


def allreduce_failpoint_hook(state: object, bucket: dist.GradBucket) -> torch.futures.Future[torch.Tensor]:
    """DDP's gradient all-reduce with the `allreduce` failpoint first: the comm hook runs when a bucket
    is ready, before this rank joins its all-reduce (registered only when that failpoint is named)."""
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks

    failpoints.hit("allreduce")
    return default_hooks.allreduce_hook(None, bucket)  # type: ignore[arg-type]


# DDP's register_comm_hook compares the annotations with the real types, not with this module's
# postponed (string) annotations
allreduce_failpoint_hook.__annotations__.update(
    bucket=dist.GradBucket, **{"return": torch.futures.Future[torch.Tensor]}
)


def shutdown() -> None:
    """gc + barrier before destroy_process_group: without it a DDP process can abort at exit."""
    gc.collect()
    if dist.is_initialized():
        dist.barrier()
        dist.destroy_process_group()

"""A DDP program for your own launcher (`launch: per_node`, `command: [torchrun, ..., train.py]`): it reads only
what torchrun gives each worker (env:// init), trains a linear model on seeded data for a few steps, and rank 0
writes a checkpoint to `$TRAINER_CHECKPOINT_DIR` and `$TRAINER_OUTPUT_DIR/result.json` with the world it saw,
every rank's host and the node variables trainctl gave the launcher (NNODES, NODE_RANK, ...).

    train.py [--hold SECONDS]   (--hold: wait that long after joining the group, for a test that cancels the run)
"""

from __future__ import annotations

import gc
import json
import os
import socket
import sys
import time

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

NODE = ("NNODES", "NODE_RANK", "NPROC_PER_NODE", "MASTER_ADDR", "MASTER_PORT", "TRAINCTL_NODE_ADDRS",
        "SKYPILOT_NODE_RANK", "SKYPILOT_NUM_NODES")  # fmt: skip


def main() -> None:
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    if sys.argv[1:2] == ["--hold"]:
        print(f"rank {rank}: holding {sys.argv[2]}s", flush=True)
        time.sleep(float(sys.argv[2]))
    torch.manual_seed(0)
    model = DistributedDataParallel(torch.nn.Linear(8, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    gen = torch.Generator().manual_seed(rank)
    for _ in range(20):
        x = torch.randn(32, 8, generator=gen)
        loss = torch.nn.functional.mse_loss(model(x), x.sum(dim=1, keepdim=True))
        opt.zero_grad()
        loss.backward()
        opt.step()
    seen = {"rank": rank, "host": socket.gethostname(), "node": {k: os.environ.get(k) for k in NODE},
            "torchelastic": os.environ.get("TORCHELASTIC_RUN_ID") is not None}  # fmt: skip
    every: list[object] = [None] * world
    dist.all_gather_object(every, seen)
    if rank == 0:
        ckpt = os.environ["TRAINER_CHECKPOINT_DIR"]
        os.makedirs(ckpt, exist_ok=True)
        torch.save(model.module.state_dict(), os.path.join(ckpt, "model.pt"))
        out = os.environ["TRAINER_OUTPUT_DIR"]
        os.makedirs(out, exist_ok=True)
        result = {"world_size": world, "loss": loss.item(), "ranks": every, "cwd": os.getcwd()}
        with open(os.path.join(out, "result.json"), "w") as fh:
            json.dump(result, fh)
        print(f"per_node train.py: world {world}, loss {loss.item():.4f}", flush=True)
    del model, opt
    gc.collect()
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()

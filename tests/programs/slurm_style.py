"""A DDP program written the way SLURM cluster guides teach it: srun starts one task per GPU, and the
program takes its rank from SLURM's own variables (SLURM_PROCID, SLURM_LOCALID, SLURM_NTASKS) and its master
from `scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1`, with MASTER_PORT from the batch script.
It never reads RANK or WORLD_SIZE. Each rank all-reduces its rank and writes what it saw to
`$TRAINER_OUTPUT_DIR/slurm-style-rank-<rank>.json` (the test reads these).
"""

from __future__ import annotations

import gc
import json
import os
import socket
import subprocess
from datetime import timedelta

import torch
import torch.distributed as dist

SEEN = ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "GROUP_RANK", "MASTER_ADDR", "MASTER_PORT",
        "SLURM_PROCID", "SLURM_LOCALID", "SLURM_NTASKS", "SLURM_NODEID", "SLURM_NTASKS_PER_NODE", "TORCHELASTIC_RUN_ID")  # fmt: skip


def main() -> None:
    rank = int(os.environ["SLURM_PROCID"])
    local_rank = int(os.environ["SLURM_LOCALID"])
    world = int(os.environ["SLURM_NTASKS"])
    nodes = subprocess.run(
        ["scontrol", "show", "hostnames", os.environ["SLURM_JOB_NODELIST"]], capture_output=True, text=True, check=True
    ).stdout.split()
    master, port = nodes[0], int(os.environ["MASTER_PORT"])
    dist.init_process_group(
        "gloo", init_method=f"tcp://{master}:{port}", rank=rank, world_size=world, timeout=timedelta(seconds=60)
    )
    total = torch.tensor([float(rank)])
    dist.all_reduce(total)
    ranks = [torch.zeros(1) for _ in range(world)]
    dist.all_gather(ranks, torch.tensor([float(rank)]))
    out = os.environ["TRAINER_OUTPUT_DIR"]
    os.makedirs(out, exist_ok=True)
    seen = {
        "rank": rank, "local_rank": local_rank, "world": world, "master": master, "sum": total.item(),
        "ranks": sorted(int(r.item()) for r in ranks), "host": socket.gethostname(),
        "env": {k: os.environ.get(k) for k in SEEN},
    }  # fmt: skip
    with open(os.path.join(out, f"slurm-style-rank-{rank}.json"), "w") as fh:
        json.dump(seen, fh)
    print(
        f"slurm-style rank {rank} of {world} (local {local_rank}) on {seen['host']}: sum {total.item():g}", flush=True
    )
    del ranks, total
    gc.collect()
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()

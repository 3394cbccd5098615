"""A user's DDP program that keeps its own state in its working folder, in the pattern of pytorch/examples
`distributed/ddp-tutorial-series/multinode.py`: rank 0 saves `snapshot.pt` (a relative path) every
`save_every` epochs, and a start that finds `snapshot.pt` there resumes from it, printing
"Resuming training from snapshot at Epoch N". Written for these tests, on CPU with gloo (that example's
CUDA device placement is what differs); the pattern is the point: state written relative to the working
folder, which trainctl gives each run of its own.

    python snapshot_ddp.py TOTAL_EPOCHS SAVE_EVERY [--fail-once-after EPOCH]

`--fail-once-after EPOCH`: the first attempt of the run exits 1 right after the snapshot of that epoch (a
`failed-once` file beside the snapshot remembers it), so the retry of the same run must find the snapshot.
"""

from __future__ import annotations

import argparse
import gc
import os
import sys

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

SNAPSHOT = "snapshot.pt"
FAILED_ONCE = "failed-once"


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("total_epochs", type=int)
    parser.add_argument("save_every", type=int)
    parser.add_argument("--fail-once-after", type=int, default=None)
    args = parser.parse_args()
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(0)
    model = torch.nn.Linear(20, 1)
    first = 0
    if os.path.exists(SNAPSHOT):
        snapshot = torch.load(SNAPSHOT, weights_only=True)
        model.load_state_dict(snapshot["MODEL_STATE"])
        first = int(snapshot["EPOCHS_RUN"])
        print(f"[rank{rank}] Resuming training from snapshot at Epoch {first}", flush=True)
    ddp = DistributedDataParallel(model)
    optimizer = torch.optim.SGD(ddp.parameters(), lr=1e-3)
    data = torch.randn(256, 21, generator=torch.Generator().manual_seed(1))[rank::world]
    for epoch in range(first, args.total_epochs):
        for batch in data.split(32):
            optimizer.zero_grad()
            loss = torch.nn.functional.mse_loss(ddp(batch[:, :20]), batch[:, 20:])
            loss.backward()
            optimizer.step()
        done = epoch + 1
        fail = args.fail_once_after == done and not os.path.exists(FAILED_ONCE)  # every rank decides alike
        if rank == 0 and done % args.save_every == 0:
            torch.save({"MODEL_STATE": ddp.module.state_dict(), "EPOCHS_RUN": done}, SNAPSHOT + ".tmp")
            os.replace(SNAPSHOT + ".tmp", SNAPSHOT)
            print(f"Epoch {done} | Training snapshot saved at {os.path.abspath(SNAPSHOT)}", flush=True)
        dist.barrier()
        if fail:
            if rank == 0:
                open(FAILED_ONCE, "w").close()
            print(f"[rank{rank}] failing on purpose after epoch {done}", flush=True)
            return 1
    print(f"[rank{rank}] trained epochs {first}..{args.total_epochs} in {os.getcwd()}", flush=True)
    del ddp, model, optimizer  # torch 2.13 can abort at exit otherwise
    gc.collect()
    dist.barrier()
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Your own training script, shipped as code (no image build): DDP on a line, helper imported from beside it.

Started by trainer-launch under torchrun on every target (RANK, WORLD_SIZE, MASTER_ADDR... are set).
Rank 0 writes result.json into $TRAINER_OUTPUT_DIR (or ./output).
"""

from __future__ import annotations

import argparse
import gc
import json
import os
from pathlib import Path

import torch
import torch.distributed as dist
from helper import GREETING, make_data
from torch.nn.parallel import DistributedDataParallel as DDP


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--lr", type=float, default=0.1)
    args = parser.parse_args()
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(0)
    model = DDP(torch.nn.Linear(1, 1))
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr)
    x, y = make_data(256, seed=rank)
    loss = torch.tensor(0.0)
    for _ in range(args.steps):
        optimizer.zero_grad()
        loss = torch.nn.functional.mse_loss(model(x), y)
        loss.backward()
        optimizer.step()
    total = torch.tensor([loss.item()])
    dist.all_reduce(total)
    if rank == 0:
        out = Path(os.environ.get("TRAINER_OUTPUT_DIR") or "output")
        out.mkdir(parents=True, exist_ok=True)
        result = {
            "greeting": GREETING,
            "world_size": world,
            "mean_loss": total.item() / world,
            "weight": model.module.weight.item(),
            "code_dir": os.getcwd(),
            "code_sha256": os.environ.get("TRAINER_CODE_SHA256"),
        }
        (out / "result.json").write_text(json.dumps(result, indent=2) + "\n")
        print(f"rank 0: {GREETING}; world {world}; loss {result['mean_loss']:.5f}", flush=True)
    del model, optimizer
    gc.collect()
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()

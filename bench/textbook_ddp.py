"""The textbook DDP loop the trainer is measured against (run under torchrun).

`torchrun --nproc-per-node 2 bench/textbook_ddp.py TRAIN.jsonl BATCH STEPS [deterministic]`: the same digits
ConvNet, JSONL records, AdamW and batch size as the trainer, with nothing but what the PyTorch
DDP tutorial has: DDP(model), DistributedSampler, loss.backward(), optimizer.step().
With `deterministic` it also turns on torch's deterministic algorithms, as the trainer does.
"""

import gc
import sys
from typing import Any

import orjson
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset
from trainer.training.models import DigitsConvNet


def jsonl_loader(path: str, batch_size: int) -> tuple[DistributedSampler[int], DataLoader[Any]]:
    """The tutorial's data: every JSONL record in memory, a DistributedSampler, a DataLoader (bench/textbook_gpu.py too)."""
    with open(path, "rb") as fh:
        records = [orjson.loads(line) for line in fh if line.strip()]
    x = torch.tensor([r["x"] for r in records], dtype=torch.float32)
    y = torch.tensor([r["y"] for r in records], dtype=torch.long)
    dataset = TensorDataset(x, y)
    sampler: DistributedSampler[int] = DistributedSampler(dataset, shuffle=True, seed=0)
    return sampler, DataLoader(dataset, batch_size=batch_size, sampler=sampler)


def main(path: str, batch_size: int, max_steps: int, deterministic: bool) -> None:
    dist.init_process_group("gloo")
    torch.use_deterministic_algorithms(deterministic, warn_only=True)
    sampler, loader = jsonl_loader(path, batch_size)
    torch.manual_seed(0)
    model = DDP(DigitsConvNet())
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    step, epoch = 0, 0
    while step < max_steps:
        sampler.set_epoch(epoch)
        for xb, yb in loader:
            loss = torch.nn.functional.cross_entropy(model(xb), yb)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            step += 1
            if step == max_steps:
                break
        epoch += 1
    del model, optimizer
    gc.collect()
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4:] == ["deterministic"])

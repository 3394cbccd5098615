"""The textbook loop the trainer is measured against on a GPU (run under torchrun, NCCL).

`torchrun --nproc-per-node 1 bench/textbook_gpu.py TRAIN.jsonl BATCH STEPS WARMUP RESULT.json [deterministic|compile]`:
the transformer of trainer/examples/transformer.py (its default ~100M size), the same JSONL records, batch,
AdamW, learning rate and bf16 autocast as the trainer run, with nothing but what the PyTorch DDP tutorial
has: DDP(model), DistributedSampler, loss.backward(), optimizer.step(). It never waits for the GPU inside
the loop; its step time is timed between two `torch.cuda.synchronize()`s, after step WARMUP and after the
last step, and written to RESULT.json with its peak memory. `compile`: nanoGPT's train.py order,
`model = torch.compile(model)`, then `DDP(model)`, and its fused AdamW (the trainer's on CUDA too).
"""

import gc
import json
import os
import sys
import time

import torch
import torch.distributed as dist
from textbook_ddp import jsonl_loader  # this script's folder is first on sys.path
from torch.nn.parallel import DistributedDataParallel as DDP
from trainer.examples.transformer import DEFAULTS, TokenClassifier


def main(
    path: str, batch_size: int, max_steps: int, warmup: int, result: str, deterministic: bool, compile: bool
) -> None:
    if deterministic:
        os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    torch.use_deterministic_algorithms(deterministic, warn_only=True)
    local_rank = int(os.environ["LOCAL_RANK"])
    torch.cuda.set_device(local_rank)
    dist.init_process_group("nccl")
    sampler, loader = jsonl_loader(path, batch_size)
    torch.manual_seed(0)
    module = TokenClassifier(**DEFAULTS).cuda()
    model = DDP(torch.compile(module) if compile else module, device_ids=[local_rank])
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=compile)  # nanoGPT: fused on CUDA
    step, epoch, t0 = 0, 0, 0.0
    while step < max_steps:
        sampler.set_epoch(epoch)
        for xb, yb in loader:
            xb, yb = xb.cuda(non_blocking=True), yb.cuda(non_blocking=True)
            with torch.autocast("cuda", dtype=torch.bfloat16):
                loss = torch.nn.functional.cross_entropy(model(xb).float(), yb)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            step += 1
            if step == warmup:
                torch.cuda.synchronize()
                t0 = time.perf_counter()
            if step == max_steps:
                break
        epoch += 1
    torch.cuda.synchronize()
    step_s = (time.perf_counter() - t0) / (max_steps - warmup)
    if dist.get_rank() == 0:
        peak = torch.cuda.max_memory_allocated() / 2**20
        with open(result, "w") as fh:
            json.dump({"step_s": step_s, "peak_mem_mb": peak, "final_loss": float(loss)}, fh)
    del model, optimizer
    gc.collect()
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    a = sys.argv
    main(a[1], int(a[2]), int(a[3]), int(a[4]), a[5], "deterministic" in a[6:], "compile" in a[6:])

"""A DDP heartbeat for the cluster fault checks: `python beat.py OUT` under torchrun.

Each step every rank all-reduces one flag (gloo), so a rank that stops stalls all others inside the
collective; after the step the rank writes "<step> <unix time>" to OUT/beat-<rank> (replaced
atomically). All ranks leave together at the first step after OUT/done exists: the flag is the
all-reduced MAX of "done exists" on each rank.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import torch
import torch.distributed as dist


def main() -> None:
    out = Path(sys.argv[1])
    out.mkdir(parents=True, exist_ok=True)
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    beat, tmp = out / f"beat-{rank}", out / f".beat-{rank}.tmp"
    step = 0
    while True:
        flag = torch.tensor([1.0 if (out / "done").exists() else 0.0])
        dist.all_reduce(flag, op=dist.ReduceOp.MAX)
        if flag.item() > 0:
            break
        step += 1
        tmp.write_text(f"{step} {time.time():.3f}\n")
        os.replace(tmp, beat)
        time.sleep(0.02)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()

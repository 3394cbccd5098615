"""A 2-process gloo program whose rank 1 raises at epoch 2 (issue 37 section 1): the failure every target's
status must name (rank 1, its node, RuntimeError and the message, the rank's last lines)."""

import torch
import torch.distributed as dist

dist.init_process_group("gloo")
rank = dist.get_rank()
for epoch in range(3):
    print(f"epoch {epoch} on rank {rank}", flush=True)
    if rank == 1 and epoch == 2:
        raise RuntimeError("boom on rank 1 at epoch 2")
    dist.all_reduce(torch.ones(1))

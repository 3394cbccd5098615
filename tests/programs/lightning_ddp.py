"""A Lightning DDP script as its docs write it for a cluster: `Trainer(devices=2, num_nodes=2, strategy="ddp")`,
nothing about the launcher. Lightning picks its cluster environment itself (TorchElasticEnvironment under
torchrun, SLURMEnvironment for srun tasks: lightning/fabric/connector.py). Each rank trains a few steps and
writes `$TRAINER_OUTPUT_DIR/lightning-rank-<rank>.json` with the environment and the world it saw.
"""

from __future__ import annotations

import gc
import json
import os
import sys

import lightning as L
import torch
import torch.distributed as dist
from torch.utils.data import DataLoader, TensorDataset


class Regression(L.LightningModule):
    def __init__(self) -> None:
        super().__init__()
        self.layer = torch.nn.Linear(8, 1)

    def training_step(self, batch: tuple[torch.Tensor, torch.Tensor], batch_idx: int) -> torch.Tensor:
        x, y = batch
        return torch.nn.functional.mse_loss(self.layer(x), y)

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.01)


def main() -> None:
    nodes, devices = int(sys.argv[1]), int(sys.argv[2])
    torch.manual_seed(0)
    x = torch.randn(256, 8)
    data = DataLoader(TensorDataset(x, x.sum(dim=1, keepdim=True)), batch_size=16)
    trainer = L.Trainer(
        accelerator="cpu", devices=devices, num_nodes=nodes, strategy="ddp", max_steps=5, logger=False,
        enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False,
    )  # fmt: skip
    trainer.fit(Regression(), data)
    env = trainer.strategy.cluster_environment
    seen = {
        "environment": type(env).__name__, "world_size": trainer.world_size, "global_rank": trainer.global_rank,
        "local_rank": trainer.local_rank, "node_rank": trainer.node_rank, "steps": trainer.global_step,
    }  # fmt: skip
    out = os.environ["TRAINER_OUTPUT_DIR"]
    os.makedirs(out, exist_ok=True)
    with open(os.path.join(out, f"lightning-rank-{trainer.global_rank}.json"), "w") as fh:
        json.dump(seen, fh)
    print(f"lightning: {seen}", flush=True)
    # torch 2.13's CPU wheel can abort at exit (134) when the interpreter's teardown meets a live process group
    # (CI: rank 3, once, after it wrote its file); Lightning leaves the group up, so close it as a DDP program must
    del trainer
    gc.collect()
    if dist.is_initialized():
        dist.barrier()
        dist.destroy_process_group()


if __name__ == "__main__":
    main()

"""Slow nodes (stragglers): the rank whose own compute time per step is well above everyone else's.

In data-parallel training every rank waits for the slowest at each gradient all-reduce, so the job
runs at the slowest node's pace, and the step time looks the same on every rank. What differs is
each rank's own time per step (`steps.StepClock`: `compute_s`, forward, backward and optimizer step,
plus `data_wait_s`, waiting for its own batches): everything but the waits in collectives, which
is where the fast ranks spend what the slow one costs them.

`StragglerWatch` (a `StepListener`) keeps this rank's compute times; every `WINDOW` steps every
rank all-gathers its compute time per step over the window (the mean: the window's compute time
over its steps), and each rank judges the same numbers the same way (`judge`): a rank above
`straggler_factor` x the median of all ranks' figures (the lower middle value for an even count, so
that with two ranks a slow one is compared with the other, not with their average) makes its node a
slow node. The mean and not each rank's median step: a node under a CPU quota (CFS throttling:
cgroup v1 `cpu.cfs_quota_us`) runs most steps at full speed and stalls for the rest of the 100 ms
period every few steps, wherever it happens to be using the CPU (its compute, its data loading);
on the --netns cluster a 20 % quota left rank 1's median step unchanged, and the job runs at the
mean's pace. One stray pause raises a mean too: `exclude` acts only after `PATIENCE` checks in a row. Rank 0 writes a log
line naming the node, the rank and the ratio, a `stragglers` record in metrics.jsonl, and
`slow_nodes.json` in the output folder (`trainctl status` shows it as `slow_nodes`). With
`stragglers: exclude`, a node flagged in `PATIENCE` checks in a row makes every rank checkpoint
and exit EXIT_SLOW_NODE, with the node in `failure.json`, so a retry runs without it.
"""

from __future__ import annotations

import statistics
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

from .. import records
from ..exit_codes import EXIT_SLOW_NODE
from ..heartbeat import node_name
from ..log import log
from .metrics import MetricsSink
from .steps import StepDone

WINDOW = 20  # steps per check (and the window each rank's mean compute time is taken over)
PATIENCE = 3  # checks in a row before `exclude` acts


@dataclass(frozen=True)
class Slow:
    node: str
    rank: int  # the node's slowest rank
    ratio: float  # its compute time per step / the median of all ranks
    compute_ms: float
    median_ms: float


class SlowNode(Exception):
    """`stragglers: exclude` acted: every rank checkpointed; the message names the node(s)."""

    def __init__(self, slow: list[Slow], record: dict[str, Any]) -> None:
        super().__init__(", ".join(f"{s.node} (rank {s.rank}, {s.ratio:.2f}x)" for s in slow))
        self.slow, self.record = slow, record


def judge(per_rank: list[float], nodes: list[str], factor: float) -> list[Slow]:
    """The nodes whose slowest rank's compute time per step is above `factor` x the median of all ranks'."""
    base = statistics.median_low(per_rank)
    if base <= 0:
        return []
    worst: dict[str, int] = {}
    for rank, node in enumerate(nodes):
        if node not in worst or per_rank[rank] > per_rank[worst[node]]:
            worst[node] = rank
    return [
        Slow(node, rank, round(per_rank[rank] / base, 2), round(per_rank[rank] * 1000, 2), round(base * 1000, 2))
        for node, rank in worst.items()
        if per_rank[rank] > factor * base
    ]


class StragglerWatch:
    """Every rank holds one; `check` is collective, at steps that are multiples of WINDOW."""

    def __init__(self, factor: float, mode: str, rank: int, world: int, device: torch.device, output_dir: Path) -> None:
        self.factor, self.mode, self.rank, self.world, self.device = factor, mode, rank, world, device
        self.output_dir = output_dir
        self.nodes: list[Any] = [None] * world
        dist.all_gather_object(self.nodes, node_name())
        self.samples: list[float] = []
        self.streak: dict[str, int] = {}
        self.flagged: dict[str, dict[str, Any]] = {}

    def on_step(self, done: StepDone, /) -> None:
        self.samples.append(done.timing.compute_s + done.timing.data_wait_s)

    def check(self, step: int, sink: MetricsSink) -> list[Slow]:
        """Collective when due: judge the window, report it, and return what `exclude` must act on."""
        if step % WINDOW or len(self.samples) < WINDOW or self.world < 2:
            return []
        window, self.samples = self.samples[-WINDOW:], []
        mine = torch.tensor([statistics.fmean(window)], dtype=torch.float64, device=self.device)
        gathered = [torch.zeros_like(mine) for _ in range(self.world)]
        dist.all_gather(gathered, mine)
        per_rank = [float(t.item()) for t in gathered]
        slow = judge(per_rank, [str(n) for n in self.nodes], self.factor)
        for node in {str(n) for n in self.nodes}:
            self.streak[node] = self.streak.get(node, 0) + 1 if any(s.node == node for s in slow) else 0
        sink.write({"kind": "stragglers", "step": step, "window": WINDOW, "factor": self.factor,
                    "compute_ms": [round(m * 1000, 3) for m in per_rank],
                    "median_ms": round(statistics.median_low(per_rank) * 1000, 3),
                    "slow": [asdict(s) for s in slow]})  # fmt: skip
        if slow and self.rank == 0:
            for s in slow:
                log(0, f"slow node: {s.node} (rank {s.rank}) computes {s.compute_ms:g} ms/step, {s.ratio:.2f}x the "
                       f"median of all ranks ({s.median_ms:g} ms) over steps {step - WINDOW + 1}-{step} "
                       f"(straggler_factor {self.factor:g}, stragglers: {self.mode})")  # fmt: skip
            self._write(step, slow)
        if self.mode == "exclude":
            return [s for s in slow if self.streak.get(s.node, 0) >= PATIENCE]
        return []

    def _write(self, step: int, slow: list[Slow]) -> None:
        for s in slow:
            seen = self.flagged.setdefault(s.node, {"node": s.node, "first_step": step, "max_ratio": s.ratio})
            seen.update(rank=s.rank, ratio=s.ratio, compute_ms=s.compute_ms, median_ms=s.median_ms, last_step=step,
                        max_ratio=max(seen["max_ratio"], s.ratio))  # fmt: skip
        data = {"factor": self.factor, "window": WINDOW, "mode": self.mode, "step": step, **records.stamp(),
                "nodes": sorted(self.flagged.values(), key=lambda n: -n["ratio"])}  # fmt: skip
        records.write_json(self.output_dir / records.SLOW_NODES, data)

    def failure(self, step: int, slow: list[Slow], checkpoint: str | None) -> dict[str, Any]:
        """The failure record of an `exclude` (rank 0 writes it)."""
        suspects = [{"node": s.node, "rank": s.rank, "heartbeat_age_s": None,
                     "why": f"slow node: {s.ratio:.2f}x the median compute time per step, {PATIENCE} checks of {WINDOW} steps in a row"}
                    for s in slow]  # fmt: skip
        return {"kind": "slow_node", "source": "trainer", **records.stamp(), "exit_code": EXIT_SLOW_NODE,
                "step": step, "factor": self.factor, "nodes": [asdict(s) for s in slow], "suspects": suspects,
                "checkpoint": checkpoint}  # fmt: skip

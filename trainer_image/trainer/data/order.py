"""The global sample order of map-style data: a function of (seed, epoch, global position) only.

An epoch's order is `randperm(n)` under a generator seeded with `seed + epoch` (the permutation
`DistributedSampler(shuffle=True)` draws). A run that has consumed the first `start` positions
of that order hands the rest out round-robin: rank `r` of `W` takes `rest[r::W]`, the last round
padded with the epoch's first samples so every rank gets as many (DistributedSampler's rule).

So the world size only decides who gets which of the remaining positions, never which positions
remain: a run resumed with 4 processes after 2 trains every sample the 2 had not reached, once.
With `start == 0`, or the same world size, the indices are exactly DistributedSampler's, so
same-size resumes stay bit-identical to an uninterrupted run.
"""

from __future__ import annotations

import math
from collections.abc import Iterator

import torch
from torch.utils.data import Sampler


def epoch_order(n: int, seed: int, epoch: int) -> list[int]:
    g = torch.Generator()
    g.manual_seed(seed + epoch)
    return torch.randperm(n, generator=g).tolist()


def rank_share(order: list[int], start: int, rank: int, world: int) -> list[int]:
    """This rank's indices of `order[start:]`, padded from the head of `order` to equal shares."""
    rest = order[start:]
    total = math.ceil(len(rest) / world) * world
    pad = total - len(rest)
    if pad:
        rest = rest + (order * math.ceil(pad / len(order)))[:pad]
    return rest[rank:total:world]


def micro_batches_left(n: int, start: int, world: int, batch_size: int) -> int:
    """Micro-batches each rank still gets this epoch after `start` global positions."""
    per_rank = math.ceil(max(0, n - start) / world)
    return math.ceil(per_rank / batch_size)


class GlobalOrderSampler(Sampler[int]):
    """This rank's indices of an epoch from global position `start` on (see the module doc)."""

    def __init__(self, n: int, rank: int, world: int, seed: int) -> None:
        self.n, self.rank, self.world, self.seed = n, rank, world, seed
        self.epoch = 0
        self.start = 0

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def __iter__(self) -> Iterator[int]:
        return iter(rank_share(epoch_order(self.n, self.seed, self.epoch), self.start, self.rank, self.world))

    def __len__(self) -> int:
        return math.ceil(max(0, self.n - self.start) / self.world)

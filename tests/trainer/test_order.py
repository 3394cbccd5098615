"""The global sample order: DistributedSampler's indices at one world size, and at another world
size the same remaining positions, each once."""

from __future__ import annotations

import itertools

import pytest
from torch.utils.data import DistributedSampler
from trainer.data.order import GlobalOrderSampler, epoch_order, micro_batches_left, rank_share


@pytest.mark.parametrize(("n", "world"), [(203, 2), (203, 3), (1437, 4), (8, 8), (5, 8)])
def test_from_the_start_it_is_distributed_samplers_order(n: int, world: int) -> None:
    for rank, epoch in itertools.product(range(world), (0, 2)):
        theirs = DistributedSampler(range(n), num_replicas=world, rank=rank, shuffle=True, seed=11)  # type: ignore[arg-type]
        theirs.set_epoch(epoch)
        ours = GlobalOrderSampler(n, rank, world, seed=11)
        ours.set_epoch(epoch)
        assert list(ours) == list(theirs) and len(ours) == len(theirs)


def test_same_world_resume_is_the_tail_of_the_uninterrupted_share() -> None:
    n, world, batch = 1437, 2, 32
    order = epoch_order(n, 7, 1)
    for rank in range(world):
        whole = rank_share(order, 0, rank, world)
        for done_batches in (0, 5, 22):
            start = done_batches * batch * world
            assert rank_share(order, start, rank, world) == whole[done_batches * batch :]


@pytest.mark.parametrize("new_world", [1, 3, 4, 5])
def test_another_world_size_trains_every_remaining_sample_once(new_world: int) -> None:
    n, start = 1437, 16 * 32 * 2  # 16 steps of 32 per rank on 2 ranks
    order = epoch_order(n, 7, 0)
    shares = [rank_share(order, start, r, new_world) for r in range(new_world)]
    assert len({len(s) for s in shares}) == 1, "equal shares keep the ranks in step"
    seen = [i for s in shares for i in s]
    remaining = order[start:]
    assert sorted(set(seen) & set(remaining)) == sorted(remaining)
    assert all(seen.count(i) == 1 for i in remaining), "a remaining sample twice"
    padding = [i for i in seen if i not in set(remaining)]
    assert padding == order[: len(padding)] and len(padding) < new_world


def test_micro_batches_left_counts_the_padded_share() -> None:
    assert micro_batches_left(1437, 0, 2, 32) == 23  # ceil(719 / 32)
    assert micro_batches_left(1437, 1024, 4, 32) == 4  # 413 left: ceil(104 / 32)
    assert micro_batches_left(1437, 1437, 4, 32) == 0

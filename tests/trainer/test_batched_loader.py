"""The loop fetches map-style batches whole (BatchSampler + batch-indexed ExampleDataset): the
batches, their order and their ids must be exactly those of the per-item DataLoader it replaced."""

from __future__ import annotations

import torch
from torch.utils.data import BatchSampler, DataLoader
from trainer.data.jsonl import ExampleDataset, Examples
from trainer.data.order import GlobalOrderSampler


def _examples(n: int) -> Examples:
    g = torch.Generator().manual_seed(0)
    return Examples(
        torch.rand(n, 64, generator=g), torch.randint(0, 10, (n,), generator=g), [f"f:{i}" for i in range(n)]
    )


class _PerItem(torch.utils.data.Dataset[tuple[torch.Tensor, torch.Tensor, int]]):
    def __init__(self, ex: Examples) -> None:
        self.ex = ex

    def __len__(self) -> int:
        return len(self.ex.wheres)

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor, int]:
        return self.ex.x[i], self.ex.y[i], i


def test_batched_fetch_equals_per_item_fetch() -> None:
    ex = _examples(203)  # not a multiple of world x batch: padded and partial batches too
    for rank in (0, 1):
        for start in (0, 3 * 8):  # per-rank samples
            batched_sampler = GlobalOrderSampler(203, rank, 2, seed=5)
            item_sampler = GlobalOrderSampler(203, rank, 2, seed=5)
            for s in (batched_sampler, item_sampler):
                s.set_epoch(3)
                s.start = start * 2  # global positions: 3 batches of 8 on each of 2 ranks
            batched = list(DataLoader(ExampleDataset(ex), batch_size=None,
                                      sampler=BatchSampler(batched_sampler, 8, drop_last=False)))  # fmt: skip
            items = list(DataLoader(_PerItem(ex), batch_size=8, sampler=item_sampler))
            # the loop's no-worker CPU path indexes the dataset with each BatchSampler chunk itself
            direct = [ExampleDataset(ex)[indices] for indices in BatchSampler(batched_sampler, 8, drop_last=False)]
            assert len(batched) == len(items) == len(direct) > 0
            for (bx, by, bi), (ix, iy, ii), (dx, dy, di) in zip(batched, items, direct, strict=True):
                assert torch.equal(bx, ix) and torch.equal(by, iy) and bi.tolist() == ii.tolist()
                assert torch.equal(dx, ix) and torch.equal(dy, iy) and di.tolist() == ii.tolist()


def test_int_index_gives_one_example() -> None:
    ex = _examples(5)
    x, y, i = ExampleDataset(ex)[3]
    assert torch.equal(x, ex.x[3]) and int(y) == int(ex.y[3]) and int(i) == 3

"""What the loop trains on: map-style or streaming data, the batch geometry, and this rank's
micro-batches from any position, so a resumed epoch continues at the batch it stopped at.

Map-style (the default) reads every record into memory and shards it with a resumable
sampler (`order.py`) whose order depends on the global position, not the world size;
`streaming: true` reads only this rank's byte range (`streaming.py`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import torch
from torch.utils.data import BatchSampler, DataLoader

from .. import s3_stream
from ..config import TrainConfig
from ..errors import TrainerInputError
from ..training import distributed as D
from .jsonl import ExampleDataset, Examples, batches_per_epoch, read_examples, resolve_files
from .order import GlobalOrderSampler, micro_batches_left
from .stream_order import batches as stream_batches
from .stream_order import plain_state, read_ahead
from .streaming import File, ShardedJsonlReader, size_of
from .tokens import TokenDataset, is_token_data

Batch = tuple[torch.Tensor, torch.Tensor, list[int]]
"""(x, y, sample ids) of one micro-batch; ids are record indices, or byte offsets when streaming."""


def per_rank_batch_size(cfg: TrainConfig, world: int) -> int:
    """`batch_size`, or `global_batch_size / (world_size x grad_accum)` when that is set."""
    if not cfg.global_batch_size:
        return cfg.batch_size
    denominator = world * cfg.grad_accum
    if cfg.global_batch_size % denominator:
        raise TrainerInputError(
            f"config field 'global_batch_size': {cfg.global_batch_size} is not divisible by "
            f"world_size x grad_accum = {world} x {cfg.grad_accum}"
        )
    return cfg.global_batch_size // denominator


class TrainData:
    """The training data of one rank and its geometry: records, steps per epoch, total steps.

    Collective when streaming (the ranks agree on the smallest share). Sets `cfg.batch_size` to
    the per-rank value, so everything downstream (a user's model builder too) sees one number.
    """

    def __init__(
        self, cfg: TrainConfig, task: str, rank: int, world: int, device: torch.device, say: Callable[[str], None]
    ) -> None:
        self.cfg, self.task, self.device, self.world, self.rank = cfg, task, device, world, rank
        self.stream_state: dict[str, Any] = {}  # the streaming order after the last batch handed out
        if cfg.train_data.startswith("s3://") and not cfg.streaming:
            raise TrainerInputError(
                f"train_data: {cfg.train_data} is read straight from S3 only by the streaming reader: set "
                "streaming: true, or stage the input (data: mode stage, the default)"
            )
        remote = cfg.train_data.startswith("s3://")  # mode: stream (s3_stream.py): each rank's share by ranged GETs
        paths = [] if remote else resolve_files(cfg.train_data, "train_data")
        files: list[File] = [*s3_stream.sources(cfg.train_data, "train_data", rank)] if remote else [*paths]
        cfg.batch_size = per_rank_batch_size(cfg, world)
        self.reader: ShardedJsonlReader | None = None
        self.examples: Examples | None = None
        self.dataset: ExampleDataset | TokenDataset
        tokens = not remote and is_token_data(paths)
        if tokens and (cfg.streaming or task != "classification"):
            raise TrainerInputError(
                "train_data: token shards (.bin) are memory-mapped samples for a classifier of the next token: "
                "use them with streaming: false and a classification model"
            )
        if cfg.streaming:
            for f in files:
                if size_of(f) == 0:
                    raise TrainerInputError(f"train_data: {f} is empty (no JSONL records)")
            self.reader = ShardedJsonlReader(files, rank, world)
            local = self.reader.count()  # one pass over the share; it keeps the first line for the sample
            fewest = -D.all_reduce_max([-local], device)[0]
            self.records = int(D.all_reduce_sum([local], device)[0])
            per_rank_batches = int(fewest) // cfg.batch_size
            first = self.reader.batch([self.reader.first], task) if self.reader.first else None
            first = first or next(ShardedJsonlReader(files, 0, 1).batches(1, task))
            self.sample_x, self.sample_y = first[0], first[1]
        else:
            if tokens:  # memory-mapped token shards (tokens.py): nothing read up front, no labels to check
                self.dataset = TokenDataset(paths, "train_data")
            else:
                self.examples = read_examples(paths, task, "train_data")
                self.dataset = ExampleDataset(self.examples)
            self.records = len(self.dataset)
            self.sampler = GlobalOrderSampler(self.records, rank, world, cfg.seed)
            per_rank_batches = batches_per_epoch(self.records, world, cfg.batch_size)
            self.sample_x, self.sample_y, _ = self.dataset[[0]]
        if self.records < world * cfg.batch_size:
            say(
                f"WARNING: train_data has {self.records} records, fewer than world_size x batch_size = "
                f"{world} x {cfg.batch_size}: ranks get partial or repeated batches"
            )
        self.steps_per_epoch = per_rank_batches // cfg.grad_accum
        if self.steps_per_epoch == 0:
            raise TrainerInputError(
                f"train_data: {self.records} records give each of {world} ranks {per_rank_batches} batches of "
                f"{cfg.batch_size}, fewer than grad_accum={cfg.grad_accum}: not one optimizer step"
            )
        self.micro_batches_per_epoch = self.steps_per_epoch * cfg.grad_accum
        self.global_batch = cfg.batch_size * cfg.grad_accum * world
        self.total_steps = self.plan_total(0, 0, 0, 0)

    # The data position of an epoch is two numbers: `samples`, global positions of the epoch's
    # order consumed (map-style: world-size independent), and `position`, this rank's micro-batches
    # (streaming, whose shards depend on the world size). With one world size they agree.

    def steps_left(self, samples: int, position: int) -> int:
        """Optimizer steps left in the current epoch from this data position."""
        if self.reader is not None:
            return max(0, self.micro_batches_per_epoch - position) // self.cfg.grad_accum
        return micro_batches_left(self.records, samples, self.world, self.cfg.batch_size) // self.cfg.grad_accum

    def advance(self, samples: int) -> int:
        """`samples` after one optimizer step (every rank's micro-batches of it)."""
        return min(self.records, samples + self.cfg.grad_accum * self.cfg.batch_size * self.world)

    def plan_total(self, step: int, epoch: int, samples: int, position: int) -> int:
        """Total optimizer steps of the run when it stands at this step and data position (a
        resume at another world size finishes its epoch in a different number of steps)."""
        cfg = self.cfg
        total = step + (self.steps_left(samples, position) if epoch < cfg.epochs else 0)
        total += self.steps_per_epoch * max(0, cfg.epochs - epoch - 1)
        return min(total, cfg.max_steps) if cfg.max_steps else total

    def micro_batches(self, epoch: int, samples: int, position: int) -> Iterator[Batch]:
        """This rank's micro-batches of `epoch` from the data position on, in a fixed order."""
        cfg = self.cfg
        if self.reader is not None:
            yield from self._stream(epoch, position)
            return
        self.sampler.set_epoch(epoch)
        self.sampler.start = samples
        batches = BatchSampler(self.sampler, cfg.batch_size, drop_last=False)
        if cfg.num_workers == 0 and self.device.type != "cuda":
            # No workers and nothing to pin: a DataLoader would hand over the same tensors and only
            # add its own per-batch cost (most of the CPU data wait, docs/benchmarks.md).
            for indices in batches:
                x, y, ids = self.dataset[indices]
                yield x, y, ids.tolist()
            return
        loader = DataLoader(
            self.dataset,
            batch_size=None,  # the sampler hands out whole batches; ExampleDataset gathers each at once
            sampler=batches,
            num_workers=cfg.num_workers,
            pin_memory=self.device.type == "cuda",
            persistent_workers=False,
        )
        for x, y, ids in loader:
            yield x, y, ids.tolist()

    def _stream(self, epoch: int, position: int) -> Iterator[Batch]:
        """Streaming batches: shuffle buffer + read-ahead thread, continuing from the reader state
        a checkpoint restored (or, from an older checkpoint without one, skipping `position` batches)."""
        cfg, reader = self.cfg, self.reader
        assert reader is not None
        state = self.stream_state if self.stream_state.get("epoch") == epoch and position else None
        source = stream_batches(
            reader, cfg.batch_size, self.task, cfg.shuffle_buffer, cfg.seed, epoch, self.rank, state
        )
        skip = position if state is None else 0
        for x, y, ids, after in read_ahead(source):
            self.stream_state = {"epoch": epoch, **after}
            if skip:
                skip -= 1
                continue
            yield x, y, ids

    # Stateful (per rank): the checkpointer gathers every rank's and hands each its own back.
    def state_dict(self) -> dict[str, Any]:
        return plain_state(self.stream_state) if self.stream_state else {}

    def load_state_dict(self, state: dict[str, Any], /) -> None:
        self.stream_state = dict(state)


class StreamedVal:
    """Validation data streamed from S3 (`data.val` with `mode: stream`): like streamed training data, each rank
    reads its ~1/N byte share (ShardedJsonlReader over s3_stream's sources), one batch in memory at a time, once
    per evaluation. Collective at the start: a count pass agrees on the batches every rank runs (the short ranks
    pad with weight-0 batches, so FSDP's collectives inside the forward pass line up, as the map-style split does)."""

    def __init__(self, uri: str, task: str, batch_size: int, rank: int, world: int, device: torch.device) -> None:
        self.task, self.batch_size = task, batch_size
        self.reader = ShardedJsonlReader(s3_stream.sources(uri, "val_data", rank), rank, world)
        local = self.reader.count()
        self.records = int(D.all_reduce_sum([local], device)[0])
        self.batches_each = -(-int(D.all_reduce_max([local], device)[0]) // batch_size)
        self.classes: tuple[int, str] | None = None  # (classes, model) once the model is built: labels checked

    def batches(
        self, pad: tuple[torch.Tensor, torch.Tensor]
    ) -> Iterator[tuple[torch.Tensor, torch.Tensor, torch.Tensor]]:
        """(x, y, weights) of this rank's share, then weight-0 copies of `pad` (a sample) up to `batches_each`."""
        done = 0
        for x, y, ids in self.reader.batches(self.batch_size, self.task):
            if self.classes is not None and int(y.max()) >= self.classes[0]:
                bad = int(torch.nonzero(y >= self.classes[0])[0])
                raise TrainerInputError(
                    f"{self.reader.where(ids[bad])}: label {int(y[bad])}, but model {self.classes[1]!r} has "
                    f"{self.classes[0]} classes"
                )
            done += 1
            yield x, y, torch.ones(len(y))
        for _ in range(done, self.batches_each):
            yield pad[0], pad[1], torch.zeros(len(pad[1]))


def read_val(cfg: TrainConfig, task: str, rank: int, world: int, device: torch.device) -> Examples | StreamedVal | None:
    """Validation data: map-style (every rank reads it; evaluation splits it by index), or streamed from S3."""
    if not cfg.val_data:
        return None
    if cfg.val_data.startswith("s3://"):  # mode: stream; the launcher left it a URI and checked it
        return StreamedVal(cfg.val_data, task, cfg.batch_size, rank, world, device)
    files = resolve_files(cfg.val_data, "val_data")
    if is_token_data(files):
        return TokenDataset(files, "val_data").examples()
    return read_examples(files, task, "val_data")

"""Save, verify and resume a run's named stateful parts, as torchtitan's CheckpointManager does.

The parts: `model` and `optimizer` (whole, from rank 0, with DDP; DCP shards from every rank with
FSDP), `scheduler` and `scaler` (their own `state_dict`s), `progress` (step, epoch and the data
position, with the last loss and evaluation) and `rng` (every rank's generators). `checkpoint.py`
owns the files (atomic writes, CRC checks, the choice of checkpoint); this module maps the parts
onto them and is the only place the loop's objects meet the format:

    meta.json  step, epoch, position, samples (+ model, model_args, world_size, strategy, config: the settings,
               run_uid: the run that wrote it)
    state.pt   scheduler, scaler, val, last_loss, rng[rank], model + optimizer (DDP only)
    dcp/       model + optimizer (FSDP only)
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import torch
import torch.distributed as dist

from .. import identity
from ..config import TrainConfig
from ..errors import TrainerInputError
from . import files as ckpt
from . import s3 as checkpoint_s3
from .async_writer import BackgroundWriter
from .rng import seed_everything, set_rng_state


class Stateful(Protocol):
    """What a part must offer (the same two methods torch.distributed.checkpoint relies on)."""

    def state_dict(self) -> dict[str, Any]: ...

    def load_state_dict(self, state_dict: dict[str, Any], /) -> None: ...


@dataclass
class Progress:
    """Where training stands; a resume continues exactly here."""

    step: int = 0
    epoch: int = 0
    position: int = 0  # micro-batches of `epoch` already trained on (per rank)
    samples: int = 0  # global positions of the epoch's order consumed: the world-size-free data position
    last_loss: float = math.nan
    val: dict[str, float | None] = field(default_factory=dict)


def seed_rank(seed: int, rank: int, step: int = 1) -> None:
    """Per-rank random streams (dropout, augmentation), distinct per rank and per restart step."""
    seed_everything(seed + 1000 * rank + step)


class Checkpointer:
    """Collective save and resume of one run's parts under `cfg.checkpoint_dir`."""

    def __init__(
        self,
        cfg: TrainConfig,
        rank: int,
        world: int,
        model: torch.nn.Module,
        optimizer: torch.optim.Optimizer,
        parts: dict[str, Stateful],
        progress: Progress,
        say: Callable[[str], None],
        per_rank: dict[str, Stateful] | None = None,
    ) -> None:
        self.cfg, self.rank, self.world, self.say = cfg, rank, world, say
        self.per_rank = per_rank or {}  # parts whose state differs by rank (the streaming reader's)
        self.root = Path(cfg.checkpoint_dir or Path(cfg.output_dir or "./output") / "checkpoints")
        self.model, self.optimizer, self.parts, self.progress = model, optimizer, parts, progress
        self.last: str | None = None  # the newest complete checkpoint of this run
        self.last_step = -1  # the step it holds
        self.resumed_from: str | None = None
        self.staged: dict[str, Any] | None = None  # the async save's reused CPU copy of the state
        self.writer = BackgroundWriter(self._written) if cfg.checkpoint_async and self.rank == 0 else None
        self.s3 = checkpoint_s3.prefix_from_env()  # checkpoint.dir: s3://...: each published one is mirrored there
        self.mirror = checkpoint_s3.Mirror(self.s3, say, cfg.keep_checkpoints) if self.s3 and self.rank == 0 else None

    def _written(self, path: Path, seconds: float) -> None:
        self.say(f"checkpoint {path} (written in the background in {seconds:.2f}s)")
        if self.mirror is not None:
            self.mirror.publish(path)

    def _choose(self) -> Path | None:
        """Rank 0 picks the newest checkpoint that verifies; every rank gets its choice."""
        box: list[Any] = [None, None, []]
        if self.rank == 0:
            ckpt.clean_stale(self.root)
            if self.s3 and self.cfg.resume == "auto":  # S3's newest, where it is newer than any here
                here = ckpt.candidates(self.root)
                checkpoint_s3.fetch_newer(self.s3, self.root, int(here[0].name[5:]) if here else -1, self.say)
            try:
                settings = ckpt.settings_of(self.cfg)
                path, warnings = ckpt.select(self.root, self.cfg.resume, self.cfg.model, settings)
                box = [str(path) if path else None, None, warnings]
            except TrainerInputError as exc:
                box = [None, str(exc), []]
        dist.broadcast_object_list(box, src=0)
        path_text, error, warnings = box
        for w in warnings:
            self.say(f"WARNING: {w}")
        if error:
            raise TrainerInputError(error)
        return Path(path_text) if path_text is not None else None

    def resume(self) -> None:
        """Load every part from the checkpoint `cfg.resume` selects (collective; nothing if none)."""
        path = self._choose()
        if path is None:
            return
        meta, state = ckpt.load_into(path, self.model, self.optimizer, self.cfg.strategy)
        for name, part in self.parts.items():
            part.load_state_dict(state[name])
        p = self.progress
        p.val = dict(state.get("val") or {})
        p.last_loss = float(state.get("last_loss", math.nan))
        p.step, p.epoch, p.position = int(meta["step"]), int(meta["epoch"]), int(meta["position"])
        self.resumed_from = self.last = str(path)
        self.last_step = p.step
        p.samples = int(meta.get("samples", -1))
        if int(meta["world_size"]) == self.world:
            set_rng_state(state["rng"][self.rank])
            for name, part in self.per_rank.items():
                if name in state:
                    part.load_state_dict(state[name][self.rank])
        elif p.samples >= 0 and not self.cfg.streaming:
            self.say(
                f"checkpoint world_size {meta['world_size']} != {self.world}: epoch {p.epoch} continues at "
                f"global sample position {p.samples} (the same order); RNG is reseeded"
            )
            seed_rank(self.cfg.seed, self.rank, p.step)
        else:
            self.say(
                f"WARNING: checkpoint world_size {meta['world_size']} != {self.world}: "
                f"epoch {p.epoch} restarts from its first batch and RNG is reseeded"
            )
            p.position = p.samples = 0
            seed_rank(self.cfg.seed, self.rank, p.step)
        dist.barrier()
        self.say(f"resumed from {path} at step {p.step} (epoch {p.epoch}, batch {p.position})")
        changed = ckpt.changes(meta.get("config") or {}, ckpt.settings_of(self.cfg))
        if changed:
            self.say(f"settings changed since that checkpoint: {', '.join(changed)}")

    def save(self) -> Path:
        """Write every part at the current step (collective; atomic, rank 0 renames it into place)."""
        cfg, p = self.cfg, self.progress
        info = ckpt.SaveInfo(
            step=p.step,
            epoch=p.epoch,
            position=p.position,
            samples=p.samples,
            model=cfg.model,
            model_args=cfg.model_args,
            world_size=self.world,
            strategy=cfg.strategy,
            config=ckpt.settings_of(cfg),
            run_uid=identity.own_uid(),
        )
        extra: dict[str, Any] = {name: part.state_dict() for name, part in self.parts.items()}
        extra.update(val=p.val, last_loss=p.last_loss)
        for name, part in self.per_rank.items():
            gathered: list[Any] = [None] * self.world
            dist.all_gather_object(gathered, part.state_dict())
            extra[name] = gathered
        if cfg.checkpoint_async:
            # the loop waits only for the copy off the training tensors (and a write still in flight)
            if self.writer is not None:
                self.writer.wait()  # the staging copy below is what the write in flight reads
            state = ckpt.snapshot(info, self.model, self.optimizer, extra, self.rank, staged=self.staged)
            if self.writer is not None and state is not None:
                self.staged, root, keep = state, self.root, cfg.keep_checkpoints
                self.writer.submit(lambda: ckpt.write(root, info, state, keep))
            path = self.root / ckpt.step_name(p.step)
        else:
            path = ckpt.save(self.root, info, self.model, self.optimizer, extra, cfg.keep_checkpoints, self.rank)
            self.say(f"checkpoint {path}")
            if self.mirror is not None:
                self.mirror.publish(path)
        self.last, self.last_step = str(path), p.step
        return path

    def save_if_due(self, stopping: bool) -> None:
        """The cadence: every `checkpoint_every` steps, and at an agreed stop (torchtitan's
        `CheckpointManager._should_save`, torchtitan/components/checkpointer/dcp.py)."""
        if self.progress.step % self.cfg.checkpoint_every == 0 or stopping:
            self.save()

    def wait(self) -> None:
        """Collective: return once the background write in flight (if any) is published."""
        if self.writer is not None:
            self.writer.wait()
        if self.mirror is not None:
            self.mirror.drain()  # the run's last checkpoint is in S3 before it ends
        if self.cfg.checkpoint_async or self.s3:  # collective: every rank has the same prefix
            dist.barrier()

    def save_unless_saved(self) -> None:
        """The final checkpoint, unless the last step was just saved; published before returning."""
        if self.last_step != self.progress.step:
            self.save()
        self.wait()

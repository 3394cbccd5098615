"""The training loop (run by `python -m trainer.train`).

Read top to bottom: set up (process group, data, model, optimizer, resume), then one loop of
optimizer steps with an evaluation per epoch, checkpoints every N steps, and a stop flag
all-reduced about every STOP_CHECK_S seconds (at steps all ranks agree on) so a SIGTERM on any
rank stops every rank at the same step.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import math
import os
import random
import sys
import time
import traceback
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")  # deterministic cuBLAS; before CUDA init

import numpy as np
import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import BatchSampler, DataLoader

from . import checkpoint as ckpt
from . import distributed as D
from . import rollcall
from .config import TrainConfig
from .data import (
    ExampleDataset,
    Examples,
    ResumableDistributedSampler,
    batches_per_epoch,
    read_examples,
    resolve_files,
)
from .errors import TrainerInputError
from .exit_codes import EXIT_BAD_INPUT, EXIT_FAILURE, EXIT_OK, EXIT_PREEMPTED
from .log import log
from .metrics import MetricsSink, peak_memory_mb
from .models import ModelSpec, resolve
from .signals import StopFlag
from .status import write_status
from .streaming import ShardedJsonlReader

STOP_CHECK_S = 0.5
"""Seconds of training between two all-reduces of the stop flag (signal-triggered checkpoints)."""

TRACE_ENV = "TRAINER_SAMPLE_TRACE"
"""Diagnostics: a directory where each rank appends the sample ids of every micro-batch."""


class Preempted(Exception):
    """Raised after the signal-triggered checkpoint is complete."""


@dataclass
class Progress:
    """Where training stands; saved in checkpoints so a resume continues exactly here."""

    step: int = 0
    epoch: int = 0
    position: int = 0  # micro-batches of `epoch` already trained on (per rank)
    resumed_from: str | None = None
    last_checkpoint: str | None = None
    last_saved_step: int = -1
    last_loss: float = float("nan")
    val: dict[str, float | None] = field(default_factory=dict)


def lr_factor(step: int, warmup: int, total: int, schedule: str) -> float:
    """Linear warmup, then cosine decay to 10% (or constant)."""
    if warmup and step < warmup:
        return (step + 1) / warmup
    if schedule == "constant" or total <= warmup:
        return 1.0
    progress = min(1.0, (step - warmup) / max(1, total - warmup))
    return 0.1 + 0.9 * 0.5 * (1.0 + math.cos(math.pi * progress))


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)


def autocast(precision: str, device: torch.device) -> contextlib.AbstractContextManager[Any]:
    if precision == "fp32":
        return contextlib.nullcontext()
    dtype = torch.bfloat16 if precision == "bf16" else torch.float16
    return torch.autocast(device_type=device.type, dtype=dtype)


@contextlib.contextmanager
def no_grad_sync(model: nn.Module, skip: bool) -> Iterator[None]:
    """Skip the gradient all-reduce on non-final micro-steps (DDP no_sync / FSDP2 equivalent)."""
    if not skip:
        yield
    elif isinstance(model, DDP):
        with model.no_sync():
            yield
    elif hasattr(model, "set_requires_gradient_sync"):
        setter: Any = model.set_requires_gradient_sync
        setter(False)
        try:
            yield
        finally:
            setter(True)
    else:
        yield


class Trainer:
    def __init__(self, cfg: TrainConfig) -> None:
        self.cfg = cfg
        self.stop = StopFlag()
        self.stop.install()
        self.info = D.init(cfg.backend, cfg.timeout_s)
        self.rank, self.world = self.info.rank, self.info.world_size
        self.device = self.info.device
        torch.use_deterministic_algorithms(True, warn_only=True)
        self.output_dir = Path(cfg.output_dir or "./output")
        self.ckpt_dir = Path(cfg.checkpoint_dir or self.output_dir / "checkpoints")
        trace = os.environ.get(TRACE_ENV)
        self.trace_dir = Path(trace) if trace else None

    def say(self, message: str) -> None:
        if self.rank == 0:
            log(self.rank, message)

    # ------------------------------------------------------------------ data

    def setup_data(self, spec: ModelSpec) -> None:
        cfg = self.cfg
        files = resolve_files(cfg.train_data, "train_data")
        if cfg.global_batch_size:
            denominator = self.world * cfg.grad_accum
            if cfg.global_batch_size % denominator:
                raise TrainerInputError(
                    f"config field 'global_batch_size': {cfg.global_batch_size} is not divisible by "
                    f"world_size x grad_accum = {self.world} x {cfg.grad_accum}"
                )
            cfg.batch_size = cfg.global_batch_size // denominator
        self.reader: ShardedJsonlReader | None = None
        self.train_set: ExampleDataset | None = None
        if cfg.streaming:
            for f in files:
                if f.stat().st_size == 0:
                    raise TrainerInputError(f"train_data: {f} is empty (no JSONL records)")
            self.reader = ShardedJsonlReader(files, self.rank, self.world)
            local = self.reader.count()
            lo, total = -D.all_reduce_max([-local], self.device)[0], D.all_reduce_sum([local], self.device)[0]
            records, per_rank_batches = int(total), int(lo) // cfg.batch_size
            first = next(self.reader.batches(1, spec.task), None) or next(
                ShardedJsonlReader(files, 0, 1).batches(1, spec.task)
            )
            self.sample_x, self.sample_y = first[0], first[1]
        else:
            self.examples: Examples = read_examples(files, spec.task, "train_data")
            self.train_set = ExampleDataset(self.examples)
            records = len(self.train_set)
            per_rank_batches = batches_per_epoch(records, self.world, cfg.batch_size)
            self.sample_x, self.sample_y = self.examples.x[:1], self.examples.y[:1]
            self.sampler = ResumableDistributedSampler(self.train_set, self.world, self.rank, cfg.seed)
        if records < self.world * cfg.batch_size:
            self.say(
                f"WARNING: train_data has {records} records, fewer than world_size x batch_size = "
                f"{self.world} x {cfg.batch_size}: ranks get partial or repeated batches"
            )
        self.records = records
        self.steps_per_epoch = per_rank_batches // cfg.grad_accum
        if self.steps_per_epoch == 0:
            raise TrainerInputError(
                f"train_data: {records} records give each of {self.world} ranks "
                f"{per_rank_batches} batches of "
                f"{cfg.batch_size}, fewer than grad_accum={cfg.grad_accum}: not one optimizer step"
            )
        self.global_batch = cfg.batch_size * cfg.grad_accum * self.world
        self.total_steps = self.steps_per_epoch * cfg.epochs
        if cfg.max_steps:
            self.total_steps = min(self.total_steps, cfg.max_steps)
        self.val: Examples | None = None
        if cfg.val_data:
            self.val = read_examples(resolve_files(cfg.val_data, "val_data"), spec.task, "val_data")

    def micro_batches(self, epoch: int, start: int) -> Iterator[tuple[torch.Tensor, torch.Tensor, list[int]]]:
        """This rank's micro-batches of `epoch`, from micro-batch `start` on, in a fixed order."""
        cfg = self.cfg
        if self.reader is not None:
            yield from self.reader.batches(cfg.batch_size, self.spec.task, skip=start * cfg.batch_size)
            return
        assert self.train_set is not None
        self.sampler.set_epoch(epoch)
        self.sampler.start_index = start * cfg.batch_size
        batches = BatchSampler(self.sampler, cfg.batch_size, drop_last=False)
        if cfg.num_workers == 0 and self.device.type != "cuda":
            # No workers and nothing to pin: a DataLoader would hand over the same tensors and only
            # add its own per-batch cost (most of the CPU data wait, docs/benchmarks.md).
            for indices in batches:
                x, y, ids = self.train_set[indices]
                yield x, y, ids.tolist()
            return
        loader = DataLoader(
            self.train_set,
            batch_size=None,  # the sampler hands out whole batches; ExampleDataset gathers each at once
            sampler=batches,
            num_workers=cfg.num_workers,
            pin_memory=self.device.type == "cuda",
            persistent_workers=False,
        )
        for x, y, ids in loader:
            yield x, y, ids.tolist()

    # ------------------------------------------------------------------ model

    def setup_model(self) -> None:
        cfg = self.cfg
        self.spec = resolve(cfg.model, cfg)
        self.setup_data(self.spec)
        seed_everything(cfg.seed)  # identical initial weights on every rank
        y_dim = 1 if self.spec.task == "classification" else int(self.sample_y.view(1, -1).shape[1])
        model = self.spec.build(cfg.model_args, tuple(self.sample_x.shape[1:]), y_dim)
        if self.spec.task == "classification":
            with torch.no_grad():
                classes = int(model(self.sample_x).shape[-1])
            labelled: list[Examples] = [self.examples] if self.train_set is not None else []
            labelled += [self.val] if self.val is not None else []
            for ex in labelled:
                if int(ex.y.max()) >= classes:
                    bad = int(torch.nonzero(ex.y >= classes)[0])
                    raise TrainerInputError(
                        f"{ex.wheres[bad]}: label {int(ex.y[bad])}, but model {cfg.model!r} has {classes} classes"
                    )
        model.to(self.device)
        self.raw_model = model
        if cfg.strategy == "fsdp":
            from torch.distributed.fsdp import fully_shard

            self.model: nn.Module = fully_shard(model)  # type: ignore[assignment]
        else:
            self.model = DDP(model, device_ids=[self.device.index] if self.device.type == "cuda" else None)
        params = [p for p in self.model.parameters() if p.requires_grad]
        if cfg.optimizer == "adamw":
            self.optimizer: torch.optim.Optimizer = torch.optim.AdamW(params, lr=cfg.lr, weight_decay=cfg.weight_decay)
        else:
            self.optimizer = torch.optim.SGD(params, lr=cfg.lr, momentum=0.9, weight_decay=cfg.weight_decay)
        self.scheduler = torch.optim.lr_scheduler.LambdaLR(
            self.optimizer, lambda s: lr_factor(s, cfg.warmup_steps, self.total_steps, cfg.lr_schedule)
        )
        self.scaler = torch.amp.GradScaler(self.device.type, enabled=cfg.precision == "fp16")
        seed_everything(cfg.seed + 1000 * self.rank + 1)  # per-rank randomness from here on

    # ------------------------------------------------------------------ checkpoints

    def resume(self, progress: Progress) -> None:
        cfg = self.cfg
        box: list[Any] = [None, None, []]
        if self.rank == 0:
            ckpt.clean_stale(self.ckpt_dir)
            try:
                path, warnings = ckpt.select(self.ckpt_dir, cfg.resume, cfg.model)
                box = [str(path) if path else None, None, warnings]
            except TrainerInputError as exc:
                box = [None, str(exc), []]
        dist.broadcast_object_list(box, src=0)
        path_text, error, warnings = box
        for w in warnings:
            self.say(f"WARNING: {w}")
        if error:
            raise TrainerInputError(error)
        if path_text is None:
            return
        path = Path(path_text)
        target = self.raw_model if cfg.strategy == "ddp" else self.model
        meta, state = ckpt.load_into(path, target, self.optimizer, cfg.strategy)
        self.scheduler.load_state_dict(state["scheduler"])
        self.scaler.load_state_dict(state["scaler"])
        progress.val = dict(state.get("val") or {})
        progress.last_loss = float(state.get("last_loss", float("nan")))
        progress.step, progress.epoch, progress.position = (
            int(meta["step"]),
            int(meta["epoch"]),
            int(meta["position"]),
        )
        progress.resumed_from = progress.last_checkpoint = str(path)
        progress.last_saved_step = progress.step
        rngs = state["rng"]
        if int(meta["world_size"]) == self.world:
            ckpt.set_rng_state(rngs[self.rank])
        else:
            self.say(
                f"WARNING: checkpoint world_size {meta['world_size']} != {self.world}: "
                f"epoch {progress.epoch} restarts from its first batch and RNG is reseeded"
            )
            progress.position = 0
            seed_everything(cfg.seed + 1000 * self.rank + progress.step)
        dist.barrier()
        self.say(f"resumed from {path} at step {progress.step} (epoch {progress.epoch}, batch {progress.position})")

    def save(self, progress: Progress) -> None:
        cfg = self.cfg
        info = ckpt.SaveInfo(
            step=progress.step,
            epoch=progress.epoch,
            position=progress.position,
            model=cfg.model,
            model_args=cfg.model_args,
            world_size=self.world,
            strategy=cfg.strategy,
        )
        extra = {
            "scheduler": self.scheduler.state_dict(),
            "scaler": self.scaler.state_dict(),
            "val": progress.val,
            "last_loss": progress.last_loss,
        }
        target = self.raw_model if cfg.strategy == "ddp" else self.model
        path = ckpt.save(self.ckpt_dir, info, target, self.optimizer, extra, cfg.keep_checkpoints, self.rank)
        progress.last_checkpoint, progress.last_saved_step = str(path), progress.step
        self.say(f"checkpoint {path}")

    # ------------------------------------------------------------------ evaluation

    @torch.no_grad()
    def evaluate(self) -> dict[str, float | None]:
        """Loss (and accuracy) on val_data. Every rank runs the same number of batches (padded
        with weight-0 samples) so FSDP's collectives line up."""
        assert self.val is not None
        cfg = self.cfg
        model = self.raw_model if cfg.strategy == "ddp" else self.model
        model.eval()
        n = len(self.val.wheres)
        mine = list(range(self.rank, n, self.world))
        per_rank = math.ceil(n / self.world)
        weights = torch.tensor([1.0] * len(mine) + [0.0] * (per_rank - len(mine)), device=self.device)
        mine += [0] * (per_rank - len(mine))
        loss_sum = correct = 0.0
        for i in range(0, per_rank, cfg.batch_size):
            idx = torch.tensor(mine[i : i + cfg.batch_size])
            w = weights[i : i + cfg.batch_size]
            x, y = self.val.x[idx].to(self.device), self.val.y[idx].to(self.device)
            with autocast(cfg.precision, self.device):
                out = model(x)
            if self.spec.task == "classification":
                losses = nn.functional.cross_entropy(out.float(), y, reduction="none")
                correct += float(((out.argmax(-1) == y).float() * w).sum())
            else:
                losses = nn.functional.mse_loss(out.float().view_as(y), y, reduction="none").view(len(y), -1).mean(1)
            loss_sum += float((losses * w).sum())
        model.train()
        total_loss, total_correct = D.all_reduce_sum([loss_sum, correct], self.device)
        result: dict[str, float | None] = {"val_loss": total_loss / n, "val_accuracy": None}
        if self.spec.task == "classification":
            result["val_accuracy"] = total_correct / n
        return result

    # ------------------------------------------------------------------ the loop

    def train_step(
        self, batches: Iterator[tuple[torch.Tensor, torch.Tensor, list[int]]], progress: Progress
    ) -> tuple[torch.Tensor, float] | None:
        """One optimizer step over grad_accum micro-batches; None when the epoch ran out."""
        cfg = self.cfg
        step_loss = torch.zeros((), device=self.device)
        data_wait = 0.0
        for micro in range(cfg.grad_accum):
            t0 = time.perf_counter()
            batch = next(batches, None)
            data_wait += time.perf_counter() - t0
            if batch is None:
                return None
            x, y, ids = batch
            if self.trace is not None:
                self.trace.write(json.dumps({"epoch": progress.epoch, "step": progress.step, "ids": ids}) + "\n")
            x, y = x.to(self.device, non_blocking=True), y.to(self.device, non_blocking=True)
            with (
                no_grad_sync(self.model, skip=micro < cfg.grad_accum - 1),
                autocast(cfg.precision, self.device),
            ):
                loss = self.spec.loss(self.model(x), y) / cfg.grad_accum
            self.scaler.scale(loss).backward()
            step_loss += loss.detach()
        if cfg.clip_grad > 0:
            self.scaler.unscale_(self.optimizer)
            nn.utils.clip_grad_norm_(self.model.parameters(), cfg.clip_grad)
        self.scaler.step(self.optimizer)
        self.scaler.update()
        self.optimizer.zero_grad(set_to_none=True)
        self.scheduler.step()
        return step_loss, data_wait

    def check_stop(self, step: int, last: tuple[int, float]) -> tuple[bool, int, tuple[int, float]]:
        """All-reduce the stop flag, and agree on the steps until the next check: about
        STOP_CHECK_S of steps (1 to 100), the fewest any rank proposes, so every rank checks, and
        stops, at the same step. One collective per step cost 10% of a small model's step time
        (docs/benchmarks.md); a signal now waits at most ~STOP_CHECK_S more."""
        now = time.perf_counter()
        step_s = (now - last[1]) / max(1, step - last[0])
        propose = max(1, min(100, int(STOP_CHECK_S / step_s))) if step_s > 0 else 1
        flag, neg_every = D.all_reduce_max([1.0 if self.stop.requested else 0.0, -float(propose)], self.device)
        return flag > 0, int(-neg_every), (step, now)

    def run(self) -> dict[str, Any]:
        cfg = self.cfg
        self.setup_model()
        progress = Progress()
        self.resume(progress)
        self.trace = None
        if self.trace_dir is not None:
            self.trace_dir.mkdir(parents=True, exist_ok=True)
            self.trace = open(self.trace_dir / f"rank-{self.rank}.jsonl", "a", buffering=1)  # noqa: SIM115
        self.say(
            f"training {cfg.model} on {self.records} records: world_size {self.world}, "
            f"batch {cfg.batch_size} "
            f"x accum {cfg.grad_accum}, {self.steps_per_epoch} steps/epoch, {self.total_steps} steps"
        )
        sink = MetricsSink(self.output_dir, self.rank, self.total_steps)
        window_loss, window_steps, window_wait, window_start = 0.0, 0, 0.0, time.perf_counter()
        next_check, last_check = progress.step + 1, (progress.step, time.perf_counter())
        try:
            while progress.epoch < cfg.epochs and progress.step < self.total_steps:
                batches = self.micro_batches(progress.epoch, progress.position)
                while progress.position < self.steps_per_epoch * cfg.grad_accum and progress.step < self.total_steps:
                    outcome = self.train_step(batches, progress)
                    if outcome is None:
                        break
                    step_loss, wait = outcome
                    progress.step += 1
                    progress.position += cfg.grad_accum
                    window_loss += float(step_loss)
                    window_steps += 1
                    window_wait += wait
                    stop = False
                    if progress.step >= next_check or progress.step == self.total_steps:
                        stop, every, last_check = self.check_stop(progress.step, last_check)
                        next_check = progress.step + every
                    if progress.step % cfg.log_every == 0 or progress.step == self.total_steps:
                        now = time.perf_counter()  # the next window starts here: logging time is counted
                        elapsed = now - window_start
                        loss_avg = D.all_reduce_sum([window_loss / window_steps], self.device)[0] / self.world
                        progress.last_loss = loss_avg
                        record = {
                            "kind": "train", "step": progress.step, "epoch": progress.epoch,
                            "loss": loss_avg, "lr": self.scheduler.get_last_lr()[0],
                            "samples_per_s": window_steps * self.global_batch / elapsed,
                            "step_time_s": elapsed / window_steps, "data_wait_s": window_wait / window_steps,
                            "world_size": self.world, "peak_mem_mb": peak_memory_mb(self.device),
                        }  # fmt: skip
                        sink.write(record)
                        sink.progress(progress.step, f"step {progress.step}/{self.total_steps} loss {loss_avg:.4f}")
                        window_loss, window_steps, window_wait, window_start = 0.0, 0, 0.0, now
                    if progress.step % cfg.checkpoint_every == 0 or stop:
                        self.save(progress)
                    if stop:
                        why = self.stop.name() or "signal on another rank"
                        self.say(f"stop requested ({why}): checkpoint written")
                        raise Preempted(progress.last_checkpoint)
                if self.val is not None:
                    progress.val = self.evaluate()
                    sink.write({"kind": "eval", "step": progress.step, "epoch": progress.epoch, **progress.val})
                    self.say(f"epoch {progress.epoch}: {json.dumps(progress.val)}")
                if progress.position >= self.steps_per_epoch * cfg.grad_accum:
                    progress.epoch += 1
                    progress.position = 0
            if progress.last_saved_step != progress.step:
                self.save(progress)
            return self.finish(progress, sink)
        finally:
            sink.close()
            if self.trace is not None:
                self.trace.close()

    def params_digest(self) -> str:
        h = hashlib.sha256()
        for name, tensor in self.raw_model.state_dict().items():
            h.update(name.encode())
            h.update(tensor.detach().cpu().contiguous().numpy().tobytes())
        return h.hexdigest()

    def finish(self, progress: Progress, sink: MetricsSink) -> dict[str, Any]:
        in_sync: bool | None = None
        if self.cfg.strategy == "ddp":
            digests: list[Any] = [None] * self.world
            dist.all_gather_object(digests, self.params_digest())
            in_sync = len(set(digests)) == 1
            if self.trace_dir is not None:
                (self.trace_dir / f"rank-{self.rank}.final.json").write_text(
                    json.dumps({"params_sha256": digests[self.rank]})
                )
        summary = {
            "world_size": self.world,
            "steps": progress.step,
            "epochs": progress.epoch,
            "final_loss": progress.last_loss,
            "val_loss": progress.val.get("val_loss"),
            "val_accuracy": progress.val.get("val_accuracy"),
            "checkpoint": progress.last_checkpoint,
            "resumed_from": progress.resumed_from,
            "params_in_sync": in_sync,
            "records": self.records,
        }
        if self.rank == 0:
            self.output_dir.mkdir(parents=True, exist_ok=True)
            tmp = self.output_dir / "summary.json.tmp"
            tmp.write_text(json.dumps(summary, indent=2) + "\n")
            os.replace(tmp, self.output_dir / "summary.json")
            sink.progress(progress.step, f"done: {json.dumps(summary)}")
        return summary

    def close(self) -> None:
        for name in ("model", "raw_model", "optimizer", "scheduler"):
            if hasattr(self, name):
                delattr(self, name)
        D.shutdown()


def _exit_now(code: int) -> int:
    """Leave without interpreter teardown: a process group that was not shut down collectively
    (a peer may be gone) can abort at exit and turn a clear exit code into SIGABRT."""
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def _from_collective(exc: BaseException) -> bool:
    """A failed gloo/NCCL collective: a peer died. One line, not a traceback, says so."""
    if isinstance(exc, dist.DistError):
        return True
    if not (isinstance(exc, RuntimeError) and dist.is_initialized()):
        return False
    frames = traceback.extract_tb(exc.__traceback__)
    if any(f"torch{os.sep}distributed{os.sep}distributed_c10d" in f.filename for f in frames):
        return True
    # DDP's gradient all-reduce fails inside backward(), with no c10d frame on the stack
    return any(word in str(exc) for word in ("third_party/gloo", "NCCL", "ProcessGroup"))


def run_training(cfg: TrainConfig) -> int:
    """Train, and turn every outcome into an exit code (docs/contracts.md section 2)."""
    rank = int(os.environ.get("RANK", "0"))
    trainer: Trainer | None = None
    try:
        trainer = Trainer(cfg)
        rank = trainer.rank
        trainer.run()
        trainer.close()
        return EXIT_OK
    except TrainerInputError as exc:
        log(rank, f"error: {exc}")
        write_status("bad_input", str(exc))
        return _exit_now(EXIT_BAD_INPUT) if dist.is_initialized() else EXIT_BAD_INPUT
    except Preempted as exc:
        if int(os.environ.get("LOCAL_RANK", "0")) == 0:
            write_status("preempted", str(exc))
        log(rank, f"preempted: exiting with {EXIT_PREEMPTED} after checkpoint {exc}")
        if trainer is not None:
            trainer.close()
        return _exit_now(EXIT_PREEMPTED)
    except Exception as exc:
        if _from_collective(exc):
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            if trainer is not None and rollcall.is_timeout(first):
                log(rank, "error: " + rollcall.describe(rank, trainer.world, cfg.timeout_s, first))
                return _exit_now(EXIT_FAILURE)
            log(rank, f"error: a collective failed (another rank probably stopped first): {first}")
            return _exit_now(EXIT_FAILURE)
        log(rank, "unexpected error:\n" + traceback.format_exc())
        return _exit_now(EXIT_FAILURE) if dist.is_initialized() else EXIT_FAILURE

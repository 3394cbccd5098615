"""The training loop (run by `python -m trainer.train`, which turns its outcome into an exit code).

Read top to bottom: `Trainer(cfg)` sets up the process group, data, model, optimizer and
checkpointer, and resumes; `run()` is one loop of optimizer steps with an evaluation per epoch,
checkpoints every N steps, and a stop flag all-reduced about every STOP_CHECK_S seconds (at
steps all ranks agree on) so a SIGTERM on any rank stops every rank at the same step.
Data lives in `loader.py`, checkpoints in `checkpointer.py`.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import math
import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any, TextIO

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP

from . import distributed as D
from .bundle import provenance
from .checkpointer import Checkpointer, Progress, Stateful, seed_rank
from .config import TrainConfig
from .data import Examples
from .errors import Preempted, TrainerInputError
from .loader import Batch, TrainData, read_val
from .log import log
from .metrics import MetricsSink, peak_memory_mb
from .models import resolve
from .rng import seed_everything, use_deterministic
from .signals import StopFlag

STOP_CHECK_S = 0.5
"""Seconds of training between two all-reduces of the stop flag (signal-triggered checkpoints)."""

TRACE_ENV = "TRAINER_SAMPLE_TRACE"
"""Diagnostics: a directory where each rank appends the sample ids of every micro-batch."""


def lr_factor(step: int, warmup: int, total: int, schedule: str) -> float:
    """Linear warmup, then cosine decay to 10% (or constant)."""
    if warmup and step < warmup:
        return (step + 1) / warmup
    if schedule == "constant" or total <= warmup:
        return 1.0
    progress = min(1.0, (step - warmup) / max(1, total - warmup))
    return 0.1 + 0.9 * 0.5 * (1.0 + math.cos(math.pi * progress))


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


def check_labels(examples: list[Examples], classes: int, model: str) -> None:
    """A class index the model cannot output would fail deep in cross_entropy: name its line."""
    for ex in examples:
        if int(ex.y.max()) >= classes:
            bad = int(torch.nonzero(ex.y >= classes)[0])
            raise TrainerInputError(
                f"{ex.wheres[bad]}: label {int(ex.y[bad])}, but model {model!r} has {classes} classes"
            )


def traced(batches: Iterator[Batch], trace: TextIO | None, progress: Progress) -> Iterator[Batch]:
    """Append each micro-batch's sample ids to the trace file (TRACE_ENV) as it is handed out."""
    for batch in batches:
        if trace is not None:
            trace.write(json.dumps({"epoch": progress.epoch, "step": progress.step, "ids": batch[2]}) + "\n")
        yield batch


class Trainer:
    """One rank's training run: everything is built in `__init__`, `run()` trains."""

    def __init__(self, cfg: TrainConfig) -> None:
        self.cfg = cfg
        use_deterministic(cfg.deterministic)  # before CUDA is initialised
        self.stop = StopFlag()
        self.stop.install()
        info = D.init(cfg.backend, cfg.timeout_s)
        self.rank, self.world, self.device = info.rank, info.world_size, info.device
        self.output_dir = Path(cfg.output_dir or "./output")
        trace = os.environ.get(TRACE_ENV)
        self.trace_dir = Path(trace) if trace else None

        # data
        self.spec = resolve(cfg.model, cfg)
        self.data = TrainData(cfg, self.spec.task, self.rank, self.world, self.device, self.say)
        self.val = read_val(cfg, self.spec.task)

        # model: identical initial weights on every rank, then DDP or FSDP2
        seed_everything(cfg.seed)
        sample_x, sample_y = self.data.sample_x, self.data.sample_y
        y_dim = 1 if self.spec.task == "classification" else int(sample_y.view(1, -1).shape[1])
        raw_model = self.spec.build(cfg.model_args, tuple(sample_x.shape[1:]), y_dim)
        if self.spec.task == "classification":
            with torch.no_grad():
                classes = int(raw_model(sample_x).shape[-1])
            check_labels([e for e in (self.data.examples, self.val) if e is not None], classes, cfg.model)
        raw_model.to(self.device)
        self.model: nn.Module
        if cfg.strategy == "fsdp":
            from torch.distributed.fsdp import fully_shard

            self.model = fully_shard(raw_model)  # type: ignore[assignment]
            self.unwrapped = self.model  # FSDP2 shards in place: no wrapper to see through
        else:
            self.model = DDP(raw_model, device_ids=[self.device.index] if self.device.type == "cuda" else None)
            self.unwrapped = raw_model

        # optimizer, LR schedule, loss scaler
        params = [p for p in self.model.parameters() if p.requires_grad]
        self.optimizer: torch.optim.Optimizer
        if cfg.optimizer == "adamw":
            self.optimizer = torch.optim.AdamW(params, lr=cfg.lr, weight_decay=cfg.weight_decay)
        else:
            self.optimizer = torch.optim.SGD(params, lr=cfg.lr, momentum=0.9, weight_decay=cfg.weight_decay)
        self.scheduler = torch.optim.lr_scheduler.LambdaLR(
            self.optimizer, lambda s: lr_factor(s, cfg.warmup_steps, self.data.total_steps, cfg.lr_schedule)
        )
        self.scaler = torch.amp.GradScaler(self.device.type, enabled=cfg.precision == "fp16")
        seed_rank(cfg.seed, self.rank)  # per-rank randomness from here on

        # checkpoints: resume where the newest complete one stopped
        self.progress = Progress()
        parts: dict[str, Stateful] = {"scheduler": self.scheduler, "scaler": self.scaler}
        self.checkpointer = Checkpointer(
            cfg, self.rank, self.world, self.unwrapped, self.optimizer, parts, self.progress, self.say,
            per_rank={"stream": self.data} if cfg.streaming else None,
        )  # fmt: skip
        self.checkpointer.resume()
        p = self.progress
        if p.samples < 0:  # a checkpoint from before global positions: the per-rank one is exact
            p.samples = min(self.data.records, p.position * cfg.batch_size * self.world)
        # another world size finishes the epoch in another number of steps (LambdaLR reads it lazily)
        self.data.total_steps = self.data.plan_total(p.step, p.epoch, p.samples, p.position)

    def say(self, message: str) -> None:
        if self.rank == 0:
            log(self.rank, message)

    def train_step(self, batches: Iterator[Batch]) -> tuple[torch.Tensor, float] | None:
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
            x, y = batch[0].to(self.device, non_blocking=True), batch[1].to(self.device, non_blocking=True)
            with no_grad_sync(self.model, skip=micro < cfg.grad_accum - 1), autocast(cfg.precision, self.device):
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
        """Train to the end (or to a stop signal: checkpoint, then `Preempted`); returns the summary."""
        cfg, data, progress = self.cfg, self.data, self.progress
        total = data.total_steps
        self.say(
            f"training {cfg.model} on {data.records} records: world_size {self.world}, batch {cfg.batch_size} "
            f"x accum {cfg.grad_accum}, {data.steps_per_epoch} steps/epoch, {total} steps"
        )
        sink = MetricsSink(self.output_dir, self.rank, total)
        trace: TextIO | None = None
        if self.trace_dir is not None:
            self.trace_dir.mkdir(parents=True, exist_ok=True)
            trace = open(self.trace_dir / f"rank-{self.rank}.jsonl", "a", buffering=1)  # noqa: SIM115
        window_loss, window_steps, window_wait, window_start = 0.0, 0, 0.0, time.perf_counter()
        next_check, last_check = progress.step + 1, (progress.step, time.perf_counter())
        try:
            while progress.epoch < cfg.epochs and progress.step < total:
                epoch_data = data.micro_batches(progress.epoch, progress.samples, progress.position)
                batches = traced(epoch_data, trace, progress)
                while data.steps_left(progress.samples, progress.position) and progress.step < total:
                    outcome = self.train_step(batches)
                    if outcome is None:
                        break
                    step_loss, wait = outcome
                    progress.step += 1
                    progress.position += cfg.grad_accum
                    progress.samples = data.advance(progress.samples)
                    window_loss += float(step_loss)
                    window_steps += 1
                    window_wait += wait
                    stop = False
                    if progress.step >= next_check or progress.step == total:
                        stop, every, last_check = self.check_stop(progress.step, last_check)
                        next_check = progress.step + every
                    if progress.step % cfg.log_every == 0 or progress.step == total:
                        now = time.perf_counter()  # the next window starts here: logging time is counted
                        elapsed = now - window_start
                        loss_avg = D.all_reduce_sum([window_loss / window_steps], self.device)[0] / self.world
                        progress.last_loss = loss_avg
                        record = {
                            "kind": "train", "step": progress.step, "epoch": progress.epoch,
                            "loss": loss_avg, "lr": self.scheduler.get_last_lr()[0],
                            "samples_per_s": window_steps * data.global_batch / elapsed,
                            "step_time_s": elapsed / window_steps, "data_wait_s": window_wait / window_steps,
                            "world_size": self.world, "peak_mem_mb": peak_memory_mb(self.device),
                        }  # fmt: skip
                        sink.write(record)
                        sink.progress(progress.step, f"step {progress.step}/{total} loss {loss_avg:.4f}")
                        window_loss, window_steps, window_wait, window_start = 0.0, 0, 0.0, now
                    if progress.step % cfg.checkpoint_every == 0 or stop:
                        self.checkpointer.save()
                    if stop:
                        self.checkpointer.wait()  # SIGTERM's checkpoint is published before the exit
                        why = self.stop.name() or "signal on another rank"
                        self.say(f"stop requested ({why}): checkpoint written")
                        raise Preempted(self.checkpointer.last)
                if self.val is not None:
                    progress.val = self.evaluate(self.val)
                    sink.write({"kind": "eval", "step": progress.step, "epoch": progress.epoch, **progress.val})
                    self.say(f"epoch {progress.epoch}: {json.dumps(progress.val)}")
                if not data.steps_left(progress.samples, progress.position):
                    progress.epoch += 1
                    progress.position = progress.samples = 0
            self.checkpointer.save_unless_saved()
            return self.finish(sink)
        finally:
            sink.close()
            if trace is not None:
                trace.close()

    @torch.no_grad()
    def evaluate(self, val: Examples) -> dict[str, float | None]:
        """Loss (and accuracy) on val_data. Every rank runs the same number of batches (padded
        with weight-0 samples) so FSDP's collectives line up."""
        cfg, model = self.cfg, self.unwrapped
        model.eval()
        n = len(val.wheres)
        mine = list(range(self.rank, n, self.world))
        per_rank = math.ceil(n / self.world)
        weights = torch.tensor([1.0] * len(mine) + [0.0] * (per_rank - len(mine)), device=self.device)
        mine += [0] * (per_rank - len(mine))
        loss_sum = correct = 0.0
        for i in range(0, per_rank, cfg.batch_size):
            idx = torch.tensor(mine[i : i + cfg.batch_size])
            w = weights[i : i + cfg.batch_size]
            x, y = val.x[idx].to(self.device), val.y[idx].to(self.device)
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

    def params_digest(self) -> str:
        h = hashlib.sha256()
        for name, tensor in self.unwrapped.state_dict().items():
            h.update(name.encode())
            h.update(tensor.detach().cpu().contiguous().numpy().tobytes())
        return h.hexdigest()

    def finish(self, sink: MetricsSink) -> dict[str, Any]:
        """Check DDP replicas agree, and write summary.json (rank 0, atomically)."""
        progress, in_sync = self.progress, None
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
            "checkpoint": self.checkpointer.last,
            "resumed_from": self.checkpointer.resumed_from,
            "params_in_sync": in_sync,
            "records": self.data.records,
            "provenance": provenance(os.environ),
        }
        if self.rank == 0:
            self.output_dir.mkdir(parents=True, exist_ok=True)
            tmp = self.output_dir / "summary.json.tmp"
            tmp.write_text(json.dumps(summary, indent=2) + "\n")
            os.replace(tmp, self.output_dir / "summary.json")
            sink.progress(progress.step, f"done: {json.dumps(summary)}")
        return summary

    def close(self) -> None:
        """Drop model and optimizer before the collective shutdown (torch 2.13 aborts otherwise)."""
        for name in ("model", "unwrapped", "optimizer", "scheduler", "checkpointer"):
            if hasattr(self, name):
                delattr(self, name)
        D.shutdown()

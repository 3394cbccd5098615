"""The training loop (run by `python -m trainer.train`, which turns its outcome into an exit code).

`Trainer(cfg)` builds everything and resumes: process group, data, model (DDP or FSDP2),
optimizer, LR schedule, checkpointer. `run()` then reads top to bottom in the shape of
torchtitan's `Trainer.train` (torchtitan/trainer.py): one optimizer step (`train_step`, the
body of nanoGPT's train.py loop: grad-accum micro-batches, no gradient sync until the last,
clip, step), and what follows a step, each delegated to an object with one job: the stop vote
(`signals.StopVote`, every rank stops after the same step), the step listeners (`StepListener`:
the metrics window, the hang watchdog `hang.HangWatch`, the straggler timing
`stragglers.StragglerWatch`), the train line (`metrics.MetricsWindow`), the progress report with the
train line's loss (`progress.ProgressReporter`), the straggler check, the checkpoint cadence (`Checkpointer.save_if_due`),
and after each epoch the evaluation (`evaluate.Evaluator`). Data lives in `loader.py`,
checkpoints in `checkpointer.py`, step timing in `steps.py`.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import math
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any, NoReturn, TextIO

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP

from .. import failpoints
from ..bundle import provenance
from ..checkpoint.checkpointer import Checkpointer, Progress, Stateful, seed_rank
from ..checkpoint.rng import deterministic_mode, seed_everything, use_deterministic
from ..config import TrainConfig
from ..data.jsonl import Examples
from ..data.loader import Batch, StreamedVal, TrainData, read_val
from ..errors import Preempted, TrainerInputError
from ..log import log
from ..tracking import Trackers
from . import distributed as D
from . import final_model
from .compiled import CompileStats, compile_model
from .evaluate import Evaluator
from .hang import HangWatch
from .kubeflow_status import KubeflowStatus
from .metrics import MetricsSink, MetricsWindow
from .models import resolve
from .precision import autocast, grad_scaler
from .progress import ProgressReporter
from .signals import StopFlag, StopVote
from .steps import StepClock, StepDone, StepListener, stamps_gradients
from .stragglers import Slow, SlowNode, StragglerWatch

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


@contextlib.contextmanager
def no_grad_sync(model: nn.Module, skip: bool) -> Iterator[None]:
    """Skip the gradient all-reduce on non-final micro-steps (DDP no_sync / FSDP2 equivalent)."""
    model = getattr(model, "_orig_mod", model)  # torch.compile's wrapper of the FSDP2 module
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


@contextlib.contextmanager
def sample_trace(trace_dir: Path | None, rank: int) -> Iterator[TextIO | None]:
    """The rank's sample-id trace file (TRACE_ENV), or None when tracing is off."""
    if trace_dir is None:
        yield None
        return
    trace_dir.mkdir(parents=True, exist_ok=True)
    with open(trace_dir / f"rank-{rank}.jsonl", "a", buffering=1) as trace:
        yield trace


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
        self.deterministic, mode = deterministic_mode(cfg.deterministic, torch.cuda.is_available())
        use_deterministic(self.deterministic)  # before CUDA is initialised
        self.stop = StopFlag()
        self.stop.install()
        self.output_dir = Path(cfg.output_dir or "./output")
        # the hang watchdog, from before the rendezvous: a rank stuck in the start is a hang too (hang.py)
        rank, world = int(os.environ.get("RANK", "0")), int(os.environ.get("WORLD_SIZE", "1"))  # torchrun's
        self.hang = HangWatch(cfg.hang_timeout, cfg.timeout_s, rank, world, self.output_dir, cfg.backend, 0,
                              cfg.startup_timeout)  # fmt: skip
        if "RANK" in os.environ and "WORLD_SIZE" in os.environ:  # torchrun's; alone, D.init sets the environment,
            self.hang.start()  # and a setenv beside the watchdog's C++ getenv is glibc's race (a SIGSEGV in CI)
            if failpoints.ACTIVE:
                self.hang.first_beat.wait(10.0)
                failpoints.hit("start-up")
        info = D.init(cfg.backend, cfg.timeout_s)
        self.rank, self.world, self.device = info.rank, info.world_size, info.device
        self.hang.backend = info.backend
        self.say(f"deterministic algorithms: {mode}")
        trace = os.environ.get(TRACE_ENV)
        self.trace_dir = Path(trace) if trace else None

        # data
        self.spec = resolve(cfg.model, cfg)
        self.data = TrainData(cfg, self.spec.task, self.rank, self.world, self.device, self.say)
        val = read_val(cfg, self.spec.task, self.rank, self.world, self.device)
        self.evaluator = None
        if val is not None:  # cfg.batch_size is the per-rank one now (TrainData set it)
            self.evaluator = Evaluator(
                val, self.spec.task, cfg.batch_size, cfg.precision, self.rank, self.world, self.device,
                pad=(self.data.sample_x, self.data.sample_y),
            )  # fmt: skip

        # model: identical initial weights on every rank, then DDP or FSDP2
        seed_everything(cfg.seed)
        sample_x, sample_y = self.data.sample_x, self.data.sample_y
        y_dim = 1 if self.spec.task == "classification" else int(sample_y.view(1, -1).shape[1])
        raw_model = self.spec.build(cfg.model_args, tuple(sample_x.shape[1:]), y_dim)
        self.about_model = {"model": cfg.model, "model_args": cfg.model_args, "input_shape": list(sample_x.shape[1:]),
                            "output_dim": y_dim, "task": self.spec.task}  # fmt: skip  # what rebuilds it (final_model)
        if self.spec.task == "classification":
            with torch.no_grad():
                classes = int(raw_model(sample_x).shape[-1])
            check_labels([e for e in (self.data.examples, val) if isinstance(e, Examples)], classes, cfg.model)
            if isinstance(val, StreamedVal):  # read once per evaluation: its labels are checked as it is read
                val.classes = (classes, cfg.model)
        raw_model.to(self.device)
        self.model: nn.Module
        self.compiled = CompileStats(cfg.compile, self.say)  # compile: nanoGPT's order, compile then DDP
        if cfg.strategy == "fsdp":
            from torch.distributed.fsdp import fully_shard

            fully_shard(raw_model)  # FSDP2 shards in place: no wrapper to see through
            self.model = compile_model(raw_model) if cfg.compile else raw_model
        else:
            step_model = compile_model(raw_model) if cfg.compile else raw_model
            self.model = step_model
            if self.world > 1 or self.device.type != "cuda" or failpoints.named("allreduce"):
                ddp = DDP(step_model, device_ids=[self.device.index] if self.device.type == "cuda" else None)
                if failpoints.named("allreduce"):  # only then: DDP's own C++ all-reduce otherwise
                    ddp.register_comm_hook(None, D.allreduce_failpoint_hook)
                self.model = ddp
            else:  # H200, 98M transformer: compiled 25 ms a step bare, 40 with DDP (docs/benchmarks.md, GPU)
                self.say("one process on one GPU: no DDP wrapper (one rank has nothing to all-reduce, and with "
                         "compile: true DDP makes dynamo split the graph at its buckets)")  # fmt: skip
        self.unwrapped = raw_model  # checkpoints and evaluation: the model's own keys, never `_orig_mod.`
        self.clock = StepClock(raw_model.parameters() if stamps_gradients(cfg.strategy, self.device) else None)

        # optimizer, LR schedule, loss scaler
        params = [p for p in self.model.parameters() if p.requires_grad]
        self.optimizer: torch.optim.Optimizer
        if cfg.optimizer == "adamw":
            # fused on CUDA: one kernel for the whole update (nanoGPT's `fused=True` on CUDA, torchtitan's default)
            fused = self.device.type == "cuda"
            self.optimizer = torch.optim.AdamW(params, lr=cfg.lr, weight_decay=cfg.weight_decay, fused=fused)
        else:
            self.optimizer = torch.optim.SGD(params, lr=cfg.lr, momentum=0.9, weight_decay=cfg.weight_decay)
        self.scheduler = torch.optim.lr_scheduler.LambdaLR(
            self.optimizer, lambda s: lr_factor(s, cfg.warmup_steps, self.data.total_steps, cfg.lr_schedule)
        )
        self.scaler = grad_scaler(cfg.precision, self.device)
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

        # the straggler timing (docs/trainer.md, "Hangs and slow nodes"); the watchdog's step is the resumed one
        self.hang.step = p.step
        self.stragglers = StragglerWatch(
            cfg.straggler_factor, cfg.stragglers, self.rank, self.world, self.device, self.output_dir
        )

    def say(self, message: str) -> None:
        if self.rank == 0:
            log(self.rank, message)

    def run(self) -> dict[str, Any]:
        """Train to the end, or to a stop every rank agreed on (checkpoint, then `Preempted`);
        returns the summary."""
        cfg, data, p = self.cfg, self.data, self.progress
        total = data.total_steps
        self.say(
            f"training {cfg.model} on {data.records} records: world_size {self.world}, batch {cfg.batch_size} "
            f"x accum {cfg.grad_accum}, {data.steps_per_epoch} steps/epoch, {total} steps"
        )
        trackers = Trackers(self.rank, p.step, str(self.output_dir))  # the job's one tracker run (rank 0)
        reporter = ProgressReporter(
            self.output_dir, self.rank, total, data.global_batch, cfg.log_every, KubeflowStatus.from_env(self.rank),
            modes={"deterministic": self.deterministic},
        )  # fmt: skip
        with (
            trackers,  # FINISHED at the end; FAILED (and W&B's files flushed) when the loop raises, a stop included
            MetricsSink(self.output_dir, self.rank, total, also=trackers.log) as sink,
            sample_trace(self.trace_dir, self.rank) as trace,
            self.hang.running(),
            contextlib.closing(reporter),  # progress.json at the last step trained, however the loop ends
        ):
            window = MetricsWindow(cfg.log_every, total, data.global_batch, self.world, self.device)
            listeners: list[StepListener] = [window, self.hang, self.stragglers, self.compiled]
            vote = StopVote(self.stop, self.device, p.step)
            while p.epoch < cfg.epochs and p.step < total:
                batches = traced(data.micro_batches(p.epoch, p.samples, p.position), trace, p)
                while data.steps_left(p.samples, p.position) and p.step < total:
                    loss = self.train_step(batches)
                    if loss is None:  # the epoch's data ran out
                        break
                    self.advance()
                    stop = vote.agreed(p.step, final=p.step == total)
                    done = StepDone(p.step, p.epoch, loss, self.clock.lap())
                    for listener in listeners:
                        listener.on_step(done)
                    if window.due(p.step):
                        self.log_train(window, sink)
                    reporter.on_step(done, p.last_loss)
                    slow = self.stragglers.check(p.step, sink)
                    with self.hang.long_phase("checkpoint"):
                        self.checkpointer.save_if_due(stopping=stop or bool(slow))
                    if slow:
                        self.exclude(slow)
                    if stop:
                        self.stop_now()
                with self.hang.long_phase("evaluate"):
                    self.end_epoch(sink)
            with self.hang.long_phase("finish"):
                self.checkpointer.save_unless_saved()
                return self.finish(sink)

    def train_step(self, batches: Iterator[Batch]) -> torch.Tensor | None:
        """One optimizer step over grad_accum micro-batches (the body of nanoGPT's loop): this rank's
        loss (a 0-d tensor on the device, not read here: see `steps.StepDone`), or None when the epoch's
        data ran out."""
        cfg, clock = self.cfg, self.clock
        clock.start()
        step_loss = torch.zeros((), device=self.device)
        for micro in range(cfg.grad_accum):
            batch = clock.next_batch(batches)
            if batch is None:
                return None
            if failpoints.ACTIVE:
                failpoints.hit("compute")
            x, y = batch[0].to(self.device, non_blocking=True), batch[1].to(self.device, non_blocking=True)
            with no_grad_sync(self.model, skip=micro < cfg.grad_accum - 1), autocast(cfg.precision, self.device):
                loss = self.spec.loss(self.model(x), y) / cfg.grad_accum
            self.scaler.scale(loss).backward()
            step_loss += loss.detach()
        clock.synced()
        if cfg.clip_grad > 0:
            self.scaler.unscale_(self.optimizer)
            nn.utils.clip_grad_norm_(self.model.parameters(), cfg.clip_grad)
        self.scaler.step(self.optimizer)
        self.scaler.update()
        self.optimizer.zero_grad(set_to_none=True)
        self.scheduler.step()
        clock.stop()  # on CUDA the step's kernels may still be running: nothing here waits for them
        return step_loss

    def advance(self) -> None:
        """Count the step: the position a checkpoint records and a resume continues from."""
        p = self.progress
        p.step += 1
        p.position += self.cfg.grad_accum
        p.samples = self.data.advance(p.samples)

    def log_train(self, window: MetricsWindow, sink: MetricsSink) -> None:
        """Collective: the window's train line, to metrics.jsonl, TensorBoard and the progress bar."""
        p = self.progress
        record = window.take(p.step, p.epoch, float(self.scheduler.get_last_lr()[0]))
        p.last_loss = record["loss"]
        sink.write(record)
        sink.progress(p.step, f"step {p.step}/{window.total} loss {p.last_loss:.4f}")

    def stop_now(self) -> NoReturn:
        """The agreed stop: once the step's checkpoint is published on every rank, `Preempted`."""
        self.checkpointer.wait()  # SIGTERM's checkpoint is published before the exit
        why = self.stop.name() or "signal on another rank"
        self.say(f"stop requested ({why}): checkpoint written")
        raise Preempted(self.checkpointer.last)

    def exclude(self, slow: list[Slow]) -> NoReturn:
        """`stragglers: exclude`: once the step's checkpoint is published on every rank, `SlowNode`."""
        self.checkpointer.wait()
        raise SlowNode(slow, self.stragglers.failure(self.progress.step, slow, self.checkpointer.last))

    def end_epoch(self, sink: MetricsSink) -> None:
        """Evaluate (with val_data), and move on to the next epoch once this one has no step left."""
        p = self.progress
        if self.evaluator is not None:
            p.val = self.evaluator(self.unwrapped)
            sink.write({"kind": "eval", "step": p.step, "epoch": p.epoch, **p.val})
            self.say(f"epoch {p.epoch}: {json.dumps(p.val)}")
        if not self.data.steps_left(p.samples, p.position):
            p.epoch += 1
            p.position = p.samples = 0

    def params_digest(self) -> str:
        h = hashlib.sha256()
        for name, tensor in self.unwrapped.state_dict().items():
            h.update(name.encode())
            h.update(tensor.detach().cpu().contiguous().numpy().tobytes())
        return h.hexdigest()

    def finish(self, sink: MetricsSink) -> dict[str, Any]:
        """Check DDP replicas agree, save the final model, and write summary.json (rank 0, atomically)."""
        cfg, progress, in_sync = self.cfg, self.progress, None
        if cfg.strategy == "ddp":
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
            "model": final_model.save(
                self.unwrapped, cfg.strategy, self.rank, self.output_dir, {**self.about_model, "step": progress.step}
            ),
            "resumed_from": self.checkpointer.resumed_from,
            "params_in_sync": in_sync,
            "deterministic": self.deterministic,
            "compile": self.compiled.summary(),
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

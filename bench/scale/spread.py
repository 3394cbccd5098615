"""Stand-in ranks spread over worker processes: whole stand-in nodes per process, one store host for all.

One interpreter starves its threads past ~1,024 stand-in ranks (docs/scale.md: at 2,048 the probe got no turn
in 4 s and siblings' last beats were a minute old), so a size above `per_proc` ranks runs here: W worker
processes (`python -m bench.scale.spread worker ...`) each hold a contiguous block of whole nodes (8 ranks),
their watchdogs exactly as ranks.py's `simulate` builds them, against the one store host; this coordinator
holds the store probe and the step driver.

The step barrier is the coordinator's stdin pipe to each worker (one line per step per worker; the worker's
main thread hands every rank its `StepDone`): no store operation, so the heartbeat and latency figures are the
watchdogs' alone. The stopped rank lives in one worker; the declaration, roll call and `failure.json` go through
the store and the shared output folder, as across real hosts. Each worker answers the coordinator's queries
(its store-operation and connect counters, memory, threads) on stdout, lines prefixed with `@@`.

The workers run at nice 19. On 2 cores, W processes' runnable watchdog threads share the CPU with the store
host's one libuv thread, thread by thread (one interpreter's GIL had let one run at a time): a first 2,048-rank
run at nice 0 (4 x 512) saw the store's p99 at 2.5 s (5 ms at 1,024 in one process) and leaders' beats time out.
In a job the store's host does not share its cores with the other nodes' watchdogs; at nice 19 it runs first.
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import IO, Any

import torch
from trainer import nodebeat
from trainer.training.steps import StepDone, StepTiming

from ..common import ROOT
from . import ranks

TAG = "@@"
# the workers' niceness: the store host and this coordinator run first (above). BENCH_SCALE_WORKER_NICE sets it
# where other work shares the machine at nice 0 (the test suite): there nice 19 starves the workers themselves
NICE = int(os.environ.get("BENCH_SCALE_WORKER_NICE", "19"))


def _peek(counter: Any) -> int:
    """An itertools.count's next value, not taken (so the coordinator's queries add nothing to the counts)."""
    return int(repr(counter)[len("count(") : -1])


def _emit(obj: dict[str, Any]) -> None:
    sys.stdout.write(TAG + json.dumps(obj) + "\n")
    sys.stdout.flush()


def worker(world: int, lo: int, hi: int, hang_timeout: int, port: int, out: Path, retry_now: bool) -> int:
    """Ranks lo..hi-1 of `world`, built as ranks.simulate builds them, driven by the coordinator's stdin lines."""
    os.nice(NICE)
    ranks._patch()
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), TORCHELASTIC_RESTART_COUNT="0")
    for var in ("TRAINCTL_STATUS_FILE", "TRAINCTL_TERMINATION_LOG", "TRAINER_FAILPOINTS"):
        os.environ.pop(var, None)
    threads_before, rss_before = threading.active_count(), ranks.rss_bytes()
    per_node = nodebeat.wanted(world)
    watches = [ranks.StandIn(hang_timeout, 600, r, world, out, "gloo", step=0, startup_timeout=ranks.STARTUP_S)
               for r in range(lo, hi)]  # fmt: skip
    for w in watches:
        w.node = f"sim{w.rank // 8:04d}"
        if per_node:
            w.board = nodebeat.NodeBoard(out / "boards" / w.node, w.rank, leader=w.rank % 8 == 0, local_world=8)
    _emit({"built": hi - lo})
    stack = contextlib.ExitStack()
    for line in sys.stdin:
        cmd, *args = line.split()
        if cmd == "step":
            took = float(args[1])
            done = StepDone(int(args[0]), 0, torch.zeros(()), StepTiming(took, 0.0, 0.0, took))
            for w in watches:
                w.on_step(done)
        elif cmd == "start":
            t0 = time.perf_counter()
            for w in watches:
                w.start()
            for w in watches:
                w.first_beat.wait(300)
            while time.perf_counter() - t0 < 300:  # as ranks.simulate: a failed first connect retries at a beat
                waiting = [w for w in watches if not w.store.reachable or not (w.store.connected or ranks._lazy(w))]
                if not waiting:
                    break
                for w in waiting if retry_now else []:
                    w.wake()
                time.sleep(0.1)
            _emit({"open": sum(w.store.connected for w in watches), "connects": _peek(ranks.CONNECTS)})
        elif cmd == "run":
            for w in watches:
                stack.enter_context(w.running())
            _emit({"running": True})
        elif cmd == "wake":
            for w in watches:
                w.wake()
        elif cmd == "count":
            _emit({"ops": _peek(ranks.OPS), "connects": _peek(ranks.CONNECTS), "rss": ranks.rss_bytes() - rss_before,
                   "threads": threading.active_count() - threads_before})  # fmt: skip
        elif cmd == "stop":
            victim = int(args[0])
            if lo <= victim < hi:
                watches[victim - lo]._stop.set()  # its watchdog beats no more
            _emit({"unreachable": sum(not w.store.reachable for w in watches),
                   "open": sum(w.store.connected for w in watches), "connects": _peek(ranks.CONNECTS)})  # fmt: skip
        elif cmd == "end":
            until = time.monotonic() + 60  # a stand-in waits for the declarer's report (bounded), then ends
            for w in watches:
                if w._thread is not None:
                    w._thread.join(timeout=max(0.0, until - time.monotonic()))
            stack.pop_all()
            _emit({"ended": True})
            return 0
    return 0


class Workers:
    """The worker processes, their pipes, and one lock so the step driver and the queries do not interleave."""

    def __init__(self, world: int, per_proc: int, hang_timeout: int, port: int, out: Path, retry_now: bool) -> None:
        env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
        self.lock, self.procs = threading.Lock(), []
        self.blocks = [(lo, min(world, lo + per_proc)) for lo in range(0, world, per_proc)]
        for i, (lo, hi) in enumerate(self.blocks):
            argv = [sys.executable, "-m", "bench.scale.spread", "worker", str(world), str(lo), str(hi),
                    str(hang_timeout), str(port), str(out)] + (["retry-now"] if retry_now else [])  # fmt: skip
            err: IO[str] = (out / f"worker{i}.err").open("w")
            self.procs.append(subprocess.Popen(argv, cwd=ROOT, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                               stderr=err, text=True))  # fmt: skip

    def send(self, line: str) -> None:
        with self.lock:
            for p in self.procs:
                assert p.stdin is not None
                p.stdin.write(line + "\n")
                p.stdin.flush()

    def replies(self) -> list[dict[str, Any]]:
        got = []
        for p in self.procs:
            assert p.stdout is not None
            while True:
                line = p.stdout.readline()
                if not line:
                    raise RuntimeError(f"a stand-in worker exited {p.wait()} (its stderr: worker*.err)")
                if line.startswith(TAG):
                    got.append(json.loads(line[len(TAG) :]))
                    break
        return got

    def ask(self, line: str) -> list[dict[str, Any]]:
        self.send(line)
        return self.replies()

    def close(self) -> None:
        for p in self.procs:
            with contextlib.suppress(OSError):
                assert p.stdin is not None
                p.stdin.close()
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()


def simulate(world: int, hang_timeout: int, port: int, out: Path, per_proc: int, step_s: float = 0.05,
             load_window_s: float = 4.0, seed: int = 39, retry_now: bool = False) -> dict[str, Any]:  # fmt: skip
    """ranks.simulate's run and figures, with the ranks in `ceil(world / per_proc)` worker processes."""
    rng = random.Random(seed)
    out.mkdir(parents=True, exist_ok=True)
    shutil.rmtree(out / "boards", ignore_errors=True)  # a board of an earlier run would look stamped
    (out / "failure.json").unlink(missing_ok=True)
    workers = Workers(world, per_proc, hang_timeout, port, out, retry_now)
    try:
        return _run(workers, world, hang_timeout, port, out, step_s, load_window_s, rng)
    finally:
        workers.close()


def _total(replies: list[dict[str, Any]], key: str) -> int:
    return sum(int(r[key]) for r in replies)


def _run(workers: Workers, world: int, hang_timeout: int, port: int, out: Path, step_s: float,
         load_window_s: float, rng: random.Random) -> dict[str, Any]:  # fmt: skip
    workers.replies()  # every worker has built its watches
    probe = ranks.Probe(port)  # connected before the ranks' connects: at 8,192 it timed out behind them (30 s)
    t0 = time.perf_counter()
    started = workers.ask("start")
    started_s, connects0 = time.perf_counter() - t0, _total(started, "connects")
    stop_steps, step, last_step_at = threading.Event(), [0], [time.time()]

    def drive() -> None:
        while not stop_steps.is_set():
            took = max(rng.lognormvariate(0, 0.1) for _ in range(min(world, 64))) * step_s
            time.sleep(took)
            if stop_steps.is_set():
                return
            step[0] += 1
            workers.send(f"step {step[0]} {took}")
            last_step_at[0] = time.time()

    workers.ask("run")
    driver = threading.Thread(target=drive, name="steps", daemon=True)
    driver.start()
    while step[0] < 1 and driver.is_alive():
        time.sleep(0.01)
    time.sleep(0.2)  # the first step's line has reached every worker
    workers.send("wake")
    beat = min(10.0, max(1.0, hang_timeout / 10))
    time.sleep(beat + 0.5)
    probe.take()
    ops0, t1 = _total(workers.ask("count"), "ops"), time.perf_counter()
    time.sleep(load_window_s)
    counted = workers.ask("count")
    ops_s = (_total(counted, "ops") - ops0) / (time.perf_counter() - t1)
    latency = probe.take()
    victim = rng.randrange(world)
    stop_steps.set()
    driver.join()
    stopped = workers.ask(f"stop {victim}")
    stopped_at, t_stop = last_step_at[0], time.monotonic()
    ops_stop, reconnects = _total(counted, "ops"), _total(stopped, "connects") - connects0
    failure = out / "failure.json"
    give_up = time.monotonic() + hang_timeout + 120
    declare_at, ops_declare, t_declare = time.monotonic() + hang_timeout, None, t_stop
    while not failure.exists() and time.monotonic() < give_up:
        if ops_declare is None and time.monotonic() >= declare_at:
            ops_declare, t_declare = _total(workers.ask("count"), "ops"), time.monotonic()
        time.sleep(0.05)
    found_at = time.time()
    ended = workers.ask("count")
    report_ops = _total(ended, "ops") - (ops_stop if ops_declare is None else ops_declare)
    report_ops_s = report_ops / max(1e-3, time.monotonic() - t_declare)
    record = json.loads(failure.read_text()) if failure.exists() else {}
    hang_probe = probe.take()
    workers.ask("end")
    probe.stop()
    suspects = record.get("suspects", [])
    return {
        "world": world, "processes": len(workers.procs), "ranks_per_process": workers.blocks[0][1],
        "per_node_beats": nodebeat.wanted(world), "hang_timeout_s": hang_timeout, "steps": step[0],
        "start_s": round(started_s, 2), "beat_interval_s": beat, "heartbeat_ops_s": round(ops_s, 1),
        "report_ops": report_ops, "report_ops_s": round(report_ops_s, 1),
        "latency_p50_ms": round(ranks.percentile(latency, 0.5) * 1e3, 3),
        "latency_p99_ms": round(ranks.percentile(latency, 0.99) * 1e3, 3),
        "latency_hang_p99_ms": round(ranks.percentile(hang_probe, 0.99) * 1e3, 3),
        "declared": bool(record), "detect_s": round(found_at - stopped_at, 2) if record else None,
        "victim": victim, "suspects": [s.get("rank") for s in suspects][:5],
        "suspects_why": [s.get("why") for s in suspects][:5], "late": [x.get("rank") for x in record.get("late", [])][:8],
        "right_suspect": len(suspects) == 1 and suspects[0].get("rank") == victim,
        "connects": connects0, "reconnects_while_beating": reconnects,
        "unreachable_at_stop": _total(stopped, "unreachable"), "connections_open_at_start": _total(started, "open"),
        "connections_open_beating": _total(stopped, "open"),
        "connects_in_hang": _total(ended, "connects") - connects0 - reconnects,
        "rss_per_rank_kib": round(_total(counted, "rss") / world / 1024, 1),
        "threads": _total(counted, "threads"), "threads_max_per_process": max(int(c["threads"]) for c in counted),
        "load_avg": round(os.getloadavg()[0], 2),
    }  # fmt: skip


if __name__ == "__main__" and sys.argv[1:2] == ["worker"]:
    a = sys.argv[2:]
    sys.exit(worker(int(a[0]), int(a[1]), int(a[2]), int(a[3]), int(a[4]), Path(a[5]), a[6:7] == ["retry-now"]))

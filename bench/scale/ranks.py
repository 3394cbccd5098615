"""Stand-in ranks: N of the trainer's real hang watchdogs in one process, against a real agent-hosted TCPStore.

Each stand-in rank is a real `trainer.training.hang.HangWatch` (its thread, its `heartbeat.BeatStore`, i.e. its own
TCPStore client connection, its beat cadence, its compare_set declaration, its roll call and `diagnose`),
packed many to a process as threads (the store client releases the GIL in its calls, so threads, not
asyncio, are what it allows). They skip the model and the collectives: a driver thread completes a step
on every rank at once after a sleep drawn per rank (a log-normal compute time; the collective makes every
rank finish at the slowest one's pace) and hands each rank's watch its `StepDone`. A "stopped" rank is
one whose watchdog thread returns without another beat (what SIGSTOP does to a process) and after which
no rank completes a step (the others wait in the collective it never joins).

What packing changes, and is patched around (the rest is the trainer's code as it runs):
- `os._exit` ends the rank's thread, not the process (`_ThreadExit`);
- `stack_lines` (every thread's stack) would be O(N) per rank with N threads in one process, where a
  real rank has a few; it returns the calling thread's stack only; `say` goes to a list, not stderr;
- no flight recorder dump (no process group);
- `BeatStore.call` counts each store operation (a subclass: the counter is the only change);
- the per-node heartbeat (trainer/nodebeat.py, from 64 ranks as in the trainer, `TRAINCTL_NODE_BEATS` forces
  it): each stand-in node of 8 ranks gets a board folder of its own under the output folder, where a real
  node's is its launcher's temporary folder; its first rank (rank % 8 == 0) is the leader.
What it cannot show: N processes' scheduling and memory, N hosts' network paths to the store's host,
one process's GIL shared by up to PER_PROC watchdogs (it slows them, so figures err on the slow side; past
PER_PROC, spread.py's worker processes), real NCCL.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import random
import shutil
import subprocess
import sys
import threading
import time
import traceback
from datetime import timedelta
from pathlib import Path
from typing import Any

import torch
from trainer import nodebeat
from trainer.heartbeat import BeatStore
from trainer.training import hang
from trainer.training.steps import StepDone, StepTiming

from ..common import ROOT

OPS = itertools.count()  # store operations issued by every stand-in rank (next() is atomic under the GIL)
CONNECTS = itertools.count()  # client connections opened (the first, and again after a failed call)


class _ThreadExit(Exception):
    """`os._exit` of a stand-in rank: ends its thread (threading ignores SystemExit)."""


class _Os:
    """`os` for trainer.training.hang, but `_exit` ends the calling thread."""

    def __getattr__(self, name: str) -> Any:
        return getattr(os, name)

    @staticmethod
    def _exit(code: int) -> None:
        raise SystemExit(code)  # threading ignores exactly SystemExit in a thread


class CountingBeatStore(BeatStore):
    """The trainer's BeatStore, counting each store operation it sends."""

    def call(self, op: str, *args: Any) -> Any:
        next(OPS)
        return super().call(op, *args)

    def _client(self) -> torch.distributed.Store:
        if self._store is None:
            next(CONNECTS)
        return super()._client()


SAID: list[str] = []
PER_PROC = 1024  # stand-in ranks in one process at most (BENCH_SCALE_RANKS_PER_PROC); more: spread.py
STARTUP_S = 480  # trainer.startup_timeout: this sandbox connects slowly (docs/scale.md); the start is measured apart


def _patch() -> None:
    vars(hang).update(os=_Os(), BeatStore=CountingBeatStore, stack_lines=lambda: traceback.format_stack()[-3:],
                      say=lambda rank, lines: SAID.extend(f"[rank{rank}] {line}" for line in lines))  # fmt: skip


class _Wakeable(threading.Event):
    """The watchdog's stop event, which the harness can also wake without setting (the loop goes on)."""

    def wake(self) -> None:
        with self._cond:  # threading.Event's own condition: its waiter returns, the flag stays clear
            self._cond.notify_all()


class StandIn(hang.HangWatch):
    """A HangWatch with a stand-in node name and no flight recorder (there is no process group), whose
    watchdog the harness wakes once when the loop starts (`wake`)."""

    def __init__(self, *args: Any, **kw: Any) -> None:
        super().__init__(*args, **kw)
        self._stop = _Wakeable()

    def wake(self) -> None:
        """End the start-up beat's wait now: the next beat is on the step cadence at once, where a rank waits
        out its start-up beat interval (up to 10 s: a tenth of STARTUP_S); the figures are of the steady state
        after it, so the harness skips the wait instead of sleeping through it."""
        assert isinstance(self._stop, _Wakeable)
        self._stop.wake()

    def _dump_flight_recorder(self) -> str | None:
        return None


class StoreHost:
    """The agent's store in a process of its own (bench/scale/store_host.py)."""

    def __enter__(self) -> StoreHost:
        env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
        self.proc = subprocess.Popen([sys.executable, "-m", "bench.scale.store_host"], cwd=ROOT, env=env,
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)  # fmt: skip
        assert self.proc.stdout is not None
        self.port = int(self.proc.stdout.readline())
        return self

    def __exit__(self, *exc: object) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


def client(port: int, timeout_s: float = 30.0) -> torch.distributed.Store:
    return torch.distributed.TCPStore("127.0.0.1", port, is_master=False, timeout=timedelta(seconds=timeout_s),
                                      wait_for_workers=False)  # fmt: skip


def rss_bytes() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    return 0


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else float("nan")


class Probe:
    """Times one `set` and one `check` on a connection of its own every 20 ms: the store's latency under load."""

    def __init__(self, port: int) -> None:
        self.store, self.samples, self._stop = client(port), [], threading.Event()
        self.samples: list[float] = []
        self._thread = threading.Thread(target=self._run, name="probe", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            t0 = time.perf_counter()
            self.store.set("/probe/k", "v")
            self.store.check(["/probe/k"])
            self.samples.append((time.perf_counter() - t0) / 2)
            self._stop.wait(0.02)

    def take(self) -> list[float]:
        got, self.samples = self.samples, []
        return got

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()


def _lazy(w: hang.HangWatch) -> bool:
    """A sibling on a board whose leader stamps opens no store connection of its own (trainer/nodebeat.py)."""
    return w.board is not None and not w.board.leader and w.first_beat.is_set()


def simulate(world: int, hang_timeout: int, port: int, out: Path, step_s: float = 0.05,
             load_window_s: float = 4.0, seed: int = 39, retry_now: bool = False) -> dict[str, Any]:  # fmt: skip
    """One run: N stand-in ranks beat, train a while, one stops; the heartbeat load and the hang's verdict.
    `retry_now` (quick runs): a rank whose first connect failed is woken to try again at once, not at its next
    start-up beat (up to 10 s later), so the start measures this sandbox's connects, not the beat's cadence."""
    _patch()
    SAID.clear()
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), TORCHELASTIC_RESTART_COUNT="0")
    for var in ("TRAINCTL_STATUS_FILE", "TRAINCTL_TERMINATION_LOG", "TRAINER_FAILPOINTS"):
        os.environ.pop(var, None)
    rng = random.Random(seed)
    out.mkdir(parents=True, exist_ok=True)
    shutil.rmtree(out / "boards", ignore_errors=True)  # a board of an earlier run would look stamped
    (out / "failure.json").unlink(missing_ok=True)
    threads_before, rss_before = threading.active_count(), rss_bytes()
    watches = [
        StandIn(hang_timeout, 600, r, world, out, "gloo", step=0, startup_timeout=STARTUP_S) for r in range(world)
    ]
    t0 = time.perf_counter()
    per_node = nodebeat.wanted(world)
    for w in watches:
        w.node = f"sim{w.rank // 8:04d}"
        if per_node:
            w.board = nodebeat.NodeBoard(out / "boards" / f"{w.node}", w.rank, leader=w.rank % 8 == 0, local_world=8)
        w.start()
    for w in watches:
        w.first_beat.wait(300)
    while time.perf_counter() - t0 < 300:  # a first beat whose connect timed out is retried at the next beat
        waiting = [w for w in watches if not w.store.reachable or not (w.store.connected or _lazy(w))]
        if not waiting:
            break
        for w in waiting if retry_now else []:
            w.wake()
        time.sleep(0.1)
    started_s, connects0 = time.perf_counter() - t0, next(CONNECTS)
    open_at_start = sum(w.store.connected for w in watches)
    probe = Probe(port)
    stop_steps, step = threading.Event(), 0
    last_step_at = [time.time()]

    def drive() -> None:
        nonlocal step
        while not stop_steps.is_set():
            took = max(rng.lognormvariate(0, 0.1) for _ in range(min(world, 64))) * step_s
            time.sleep(took)
            if stop_steps.is_set():
                return
            step += 1
            done = StepDone(step, 0, torch.zeros(()), StepTiming(took, 0.0, 0.0, took))
            for w in watches:
                w.on_step(done)
            last_step_at[0] = time.time()

    with contextlib.ExitStack() as stack:
        for w in watches:
            stack.enter_context(w.running())
        driver = threading.Thread(target=drive, name="steps", daemon=True)
        driver.start()
        while step < 1 and driver.is_alive():  # a first step on every rank: its deadline is hang_timeout now
            time.sleep(0.01)
        for w in watches:
            w.wake()  # its next beat now, on the step cadence (StandIn.wake)
        time.sleep(min(10.0, max(1.0, hang_timeout / 10)) + 0.5)  # one step-cadence beat: every thread is on it
        probe.take()
        ops0, t1 = next(OPS), time.perf_counter()
        time.sleep(load_window_s)
        ops_s = (next(OPS) - ops0) / (time.perf_counter() - t1)
        latency = probe.take()
        rss_running = rss_bytes()
        victim = rng.randrange(world)
        stop_steps.set()  # the victim stops: no rank completes another step
        driver.join()
        watches[victim]._stop.set()  # its watchdog beats no more
        unreachable = sum(not w.store.reachable for w in watches)
        open_beating = sum(w.store.connected for w in watches)
        reconnects = next(CONNECTS) - connects0
        stopped_at, ops_stop, t_stop = last_step_at[0], next(OPS), time.monotonic()
        failure = out / "failure.json"
        give_up = time.monotonic() + hang_timeout + 120
        declare_at, ops_declare = time.monotonic() + hang_timeout, None  # no rank declares before its deadline
        while not failure.exists() and time.monotonic() < give_up:
            if ops_declare is None and time.monotonic() >= declare_at:
                ops_declare, t_declare = next(OPS), time.monotonic()
            time.sleep(0.05)
        found_at = time.time()
        if ops_declare is None:
            ops_declare, t_declare = ops_stop, t_stop
        report_ops = next(OPS) - ops_declare  # from the deadline to failure.json: declaration, roll call, report
        report_ops_s = report_ops / max(1e-3, time.monotonic() - t_declare)
        record = json.loads(failure.read_text()) if failure.exists() else {}
        hang_probe = probe.take()
        for w in watches:  # a stand-in waits for the declarer's report (bounded), then its thread ends
            if w._thread is not None:
                w._thread.join(timeout=60)
        stack.pop_all()
    probe.stop()
    suspects = record.get("suspects", [])
    right = len(suspects) == 1 and suspects[0].get("rank") == victim
    return {
        "world": world, "per_node_beats": per_node, "hang_timeout_s": hang_timeout, "steps": step, "start_s": round(started_s, 2),
        "beat_interval_s": min(10.0, max(1.0, hang_timeout / 10)),
        "heartbeat_ops_s": round(ops_s, 1), "report_ops": report_ops, "report_ops_s": round(report_ops_s, 1), "latency_p50_ms": round(percentile(latency, 0.5) * 1e3, 3),
        "latency_p99_ms": round(percentile(latency, 0.99) * 1e3, 3),
        "latency_hang_p99_ms": round(percentile(hang_probe, 0.99) * 1e3, 3),
        "declared": bool(record), "detect_s": round(found_at - stopped_at, 2) if record else None,
        "victim": victim, "suspects": [s.get("rank") for s in suspects][:5], "right_suspect": right,
        "connects": connects0, "reconnects_while_beating": reconnects, "unreachable_at_stop": unreachable,
        "connections_open_at_start": open_at_start, "connections_open_beating": open_beating,
        "connects_in_hang": next(CONNECTS) - connects0 - reconnects,
        "rss_per_rank_kib": round((rss_running - rss_before) / world / 1024, 1),
        "processes": 1, "ranks_per_process": world,
        "threads": threading.active_count() - threads_before, "load_avg": round(os.getloadavg()[0], 2),
    }  # fmt: skip


def capacity(port: int, clients: int = 16, seconds: float = 3.0, batch: int = 1) -> dict[str, float]:
    """The store's capacity as this machine can drive it: `clients` connections doing set+check back to back
    (`batch` > 1: a node leader's `multi_set` of `batch` beats + check, trainer/nodebeat.py)."""
    stores = [client(port) for _ in range(clients)]
    count = [0] * clients
    stop = threading.Event()

    def hammer(i: int) -> None:
        s, key = stores[i], f"/cap/{i}"
        keys, values = [f"{key}/{j}" for j in range(batch)], ["x" * 160] * batch  # about a Beat's JSON each
        while not stop.is_set():
            if batch > 1:
                s.multi_set(keys, values)
            else:
                s.set(key, values[0])
            s.check([key])
            count[i] += 2

    threads = [threading.Thread(target=hammer, args=(i,), daemon=True) for i in range(clients)]
    t0 = time.perf_counter()
    for t in threads:
        t.start()
    time.sleep(seconds)
    stop.set()
    for t in threads:
        t.join()
    return {"ops_s": sum(count) / (time.perf_counter() - t0), "clients": clients, "load_avg": os.getloadavg()[0]}


def main(argv: list[str]) -> int:
    """`python -m bench.scale.ranks N HANG_TIMEOUT OUT_DIR [LOAD_WINDOW_S [retry-now]]`: one size in a process of
    its own (with its worker processes past PER_PROC ranks), as one JSON line."""
    world, hang_timeout, out = int(argv[0]), int(argv[1]), Path(argv[2])
    window, retry_now = float(argv[3]) if len(argv) > 3 else 4.0, argv[4:5] == ["retry-now"]
    per_proc = max(8, int(os.environ.get("BENCH_SCALE_RANKS_PER_PROC", PER_PROC)) // 8 * 8)  # whole nodes
    with StoreHost() as host:
        if world > per_proc:  # one interpreter starves its threads past ~1,024 (bench/scale/spread.py)
            from . import spread

            result = spread.simulate(world, hang_timeout, host.port, out, per_proc, load_window_s=window,
                                     retry_now=retry_now)  # fmt: skip
        else:
            result = simulate(world, hang_timeout, host.port, out, load_window_s=window, retry_now=retry_now)
    # whether the store's lookup of each client (`::ffff:127.0.0.1`) is answered from /etc/hosts, as the test
    # session arranges (tests/support/etc_hosts.py), or by the resolver, whose lost queries stall it 5 s
    result["v4_mapped_loopback_in_hosts"] = "::ffff:127.0.0.1" in Path("/etc/hosts").read_text()
    print(json.dumps(result), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

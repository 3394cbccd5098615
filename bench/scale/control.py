"""The control paths against N: heartbeat load, the store's latency and capacity, the time to declare a hang
and name the stopped rank, memory per rank, the straggler verdict; each size in a process of its own
(ranks.py), and the growth of each figure fitted as a power of N (log-log least squares).

`BENCH_SCALE_SIZES=8,64,512,1024,8192` picks the sizes of a full run (default 8,64,512,1024);
`BENCH_SCALE_CAP_S` one size's wall-clock cap (default 420 s); `BENCH_SCALE_RANKS_PER_PROC` the most stand-in
ranks in one process (default 1,024; a larger size is spread over worker processes: spread.py).
"""

from __future__ import annotations

import json
import math
import os
import random
import subprocess
import sys
import time
from typing import Any

from ..common import ROOT, WORK, Figure, figure, unavailable

NAME = "scale"
HANG_TIMEOUT = 10  # s: the trainer's fastest beat (1 s = max(1, hang_timeout / 10)), so the heaviest load
QUICK_HANG_TIMEOUT = 2
CAP_S = 420  # one size's wall-clock cap


def one_size(world: int, hang_timeout: int, window_s: float = 4.0, retry_now: bool = False) -> dict[str, Any]:
    """ranks.py's run of one size, in a fresh process (its memory and threads are that size's alone); the
    heartbeat load is counted over `window_s`; `retry_now`: a failed first connect is tried again at once."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    out = WORK / f"ranks-{world}"
    argv = [sys.executable, "-m", "bench.scale.ranks", str(world), str(hang_timeout), str(out), str(window_s)]
    argv += ["retry-now"] if retry_now else []
    cap = int(os.environ.get("BENCH_SCALE_CAP_S", CAP_S))
    proc = subprocess.run(argv, cwd=ROOT, env=env, capture_output=True, text=True, timeout=cap)
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("{")]
    if proc.returncode != 0 or not lines:
        raise RuntimeError(f"{world} stand-in ranks exited {proc.returncode}: {proc.stderr[-2000:]}")
    return dict(json.loads(lines[-1]))


def growth(sizes: list[int], values: list[float]) -> float | None:
    """b in value ~ a * N^b (least squares on logs); None with fewer than 3 positive points."""
    pts = [(math.log(n), math.log(v)) for n, v in zip(sizes, values, strict=True) if v and v > 0]
    if len(pts) < 3:
        return None
    mx, my = sum(x for x, _ in pts) / len(pts), sum(y for _, y in pts) / len(pts)
    den = sum((x - mx) ** 2 for x, _ in pts)
    return round(sum((x - mx) * (y - my) for x, y in pts) / den, 2) if den else None


def straggler_verdict(world: int, reps: int = 5) -> tuple[list[float], bool]:
    """Seconds of `stragglers.judge` over `world` ranks' figures with one rank 3x slow, and whether it names
    that rank's node (the all-gather before it is a collective: not simulated)."""
    from trainer.training.stragglers import judge

    rng = random.Random(world)
    times, right = [], True
    for _ in range(reps):
        per_rank = [rng.lognormvariate(0, 0.05) * 0.05 for _ in range(world)]
        slow = rng.randrange(world)
        per_rank[slow] *= 3
        nodes = [f"sim{r // 8:04d}" for r in range(world)]
        t0 = time.perf_counter()
        found = judge(per_rank, nodes, 2.0)
        times.append(time.perf_counter() - t0)
        right = right and [s.rank for s in found] == [slow]
    return times, right


def store_capacity(seconds: float = 3.0, batch: int = 1) -> dict[str, float]:
    from .ranks import StoreHost, capacity

    with StoreHost() as host:
        return capacity(host.port, clients=16, seconds=seconds, batch=batch)


def run_ranks(quick: bool = False, name: str = NAME) -> list[Figure]:
    """The stand-in figures, under `name` (`scale`, or `ranks` where they run alone: python -m bench --only ranks)."""
    default = "8,64" if quick else "8,64,512,1024"
    sizes = [int(s) for s in os.environ.get("BENCH_SCALE_SIZES", default).split(",") if s]
    hang_timeout = QUICK_HANG_TIMEOUT if quick else HANG_TIMEOUT
    window_s = 2.0 if quick else 4.0  # quick: 2 beats a rank in the load window, a check that it runs
    cap = store_capacity(1.0 if quick else 3.0)
    figs = [figure(name, "agent TCPStore capacity (16 clients, set+check of a 160-byte beat)", [cap["ops_s"]],
                   unit="ops/s", note="libuv server in its own process; the clients share this machine's 2 cores",
                   detail={"load_avg": round(cap["load_avg"], 2), "seconds": 1.0 if quick else 3.0})]  # fmt: skip
    batched = store_capacity(1.0 if quick else 3.0, batch=8)  # the per-node beat's operation (nodebeat.py)
    figs.append(figure(name, "agent TCPStore capacity (16 clients, multi_set of 8 beats + check)", [batched["ops_s"]],
                       unit="ops/s", note="a node leader's beat: one multi_set of its 8 ranks' beats, one check",
                       detail={"load_avg": round(batched["load_avg"], 2), "seconds": 1.0 if quick else 3.0}))  # fmt: skip
    runs: list[dict[str, Any]] = []
    for n in sizes:
        try:
            runs.append(one_size(n, hang_timeout, window_s, retry_now=quick))
        except (subprocess.TimeoutExpired, RuntimeError) as exc:  # the sizes that ran keep their figures
            if quick:
                raise
            why = "past its cap" if isinstance(exc, subprocess.TimeoutExpired) else str(exc)[-300:]
            figs.append(unavailable(name, f"{n} stand-in ranks: hang declared, stopped rank named",
                                    f"did not finish ({why}; load {os.getloadavg()[0]:.1f}): docs/scale.md",
                                    f"<= {hang_timeout + 30}", "s"))  # fmt: skip
            break  # a larger size would not finish either
    for r in runs:
        n, load = r["world"], r["load_avg"]
        common = {"load_avg": load, "hang_timeout_s": r["hang_timeout_s"], "beat_interval_s": r["beat_interval_s"],
                  "per_node_beats": r.get("per_node_beats", False), "processes": r.get("processes", 1),
                  "ranks_per_process": r.get("ranks_per_process", n)}  # fmt: skip
        figs.append(figure(name, f"{n} stand-in ranks: watchdogs connected, first beat", [r["start_s"]], unit="s",
                           detail={**common, "connects": r["connects"], "failed_connects_retried_at_once": quick}))  # fmt: skip
        figs.append(figure(name, f"{n} stand-in ranks: agent store connections while beating",
                           [r.get("connections_open_beating", n)], unit="connections",
                           note="one per node from 64 ranks: siblings connect only to publish themselves",
                           detail={**common, "connects_in_hang": r.get("connects_in_hang")}))  # fmt: skip
        figs.append(figure(name, f"{n} stand-in ranks: heartbeat store load", [r["heartbeat_ops_s"]], unit="ops/s",
                           target=f"<= {min(cap['ops_s'], batched['ops_s']) / 2:.0f}",
                           note="target: half the lower measured capacity",
                           detail={**common, "latency_p50_ms": r["latency_p50_ms"], "latency_p99_ms": r["latency_p99_ms"],
                                   "reconnects": r["reconnects_while_beating"]}))  # fmt: skip
        bound, label = r["hang_timeout_s"] + 30, f"{n} stand-in ranks: hang declared, stopped rank named"
        if r["detect_s"] is None:
            figs.append(
                unavailable(
                    name, label, f"no hang declared within hang_timeout + 120 s (load {load})", f"<= {bound}", "s"
                )
            )
        else:
            figs.append(figure(name, label, [r["detect_s"]], unit="s", target=f"<= {bound}",
                               note="" if r["right_suspect"] else f"WRONG SUSPECT(S) {r['suspects']}, victim {r['victim']}",
                               detail={**common, "victim": r["victim"], "suspects": r["suspects"],
                                       "store_ops_deadline_to_record": r["report_ops"],
                                       "store_ops_s_deadline_to_record": r["report_ops_s"],
                                       "latency_during_hang_p99_ms": r["latency_hang_p99_ms"],
                                       "unreachable_at_stop": r["unreachable_at_stop"]}))  # fmt: skip
            figs[-1].right = bool(r["right_suspect"])
        figs.append(figure(name, f"{n} stand-in ranks: memory per rank of the watchdog", [r["rss_per_rank_kib"]],
                           unit="KiB", detail=common))  # fmt: skip
        judged, right = straggler_verdict(n)
        figs.append(figure(name, f"{n} ranks: straggler verdict (judge)", [t * 1e3 for t in judged], unit="ms",
                           note="named the slow rank" if right else "did NOT name the slow rank"))  # fmt: skip
    if len(runs) >= 3:
        ns = [r["world"] for r in runs]
        fits = {"start_s": growth(ns, [r["start_s"] for r in runs]),
                "heartbeat_ops_s": growth(ns, [r["heartbeat_ops_s"] for r in runs]),
                "hang_overhead_s": growth(ns, [(r["detect_s"] or 0) - r["hang_timeout_s"] for r in runs]),
                "rss_per_rank_kib": growth(ns, [r["rss_per_rank_kib"] for r in runs])}  # fmt: skip
        figs += [figure(name, f"growth exponent b of {what} ~ N^b, N = {ns[0]}-{ns[-1]}", [b], unit="b")
                 for what, b in fits.items() if b is not None]  # fmt: skip
    return figs

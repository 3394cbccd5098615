"""Benchmark 7: how soon a hang is reported, and what the hang and fault machinery costs when nothing fails.

Detection: the digits job on 2 local gloo processes (the launcher and trainer as every target runs them);
after 40 steps rank 1 is SIGSTOPped, and the figure is the time from the last completed step (the live
rank's heartbeat in the record) to failure.json, with the default adaptive hang_timeout and with
`hang_timeout: 10`. Beside it, the defaults it replaces: the process group's timeout, after which a
collective fails with no name attached (torch's default 1800 s, the trainer's `timeout_s`; NCCL's 600 s).

Cost when nothing fails: an unnamed failpoint's call site (`if failpoints.ACTIVE: failpoints.hit(...)`)
with TRAINER_FAILPOINTS unset, and with another point named, in ns per call, against a digits step; and
the flight recorder the launcher turns on (TORCH_FR_BUFFER_SIZE=2000 against 0): a gloo all-reduce of
one 1,000-float tensor between 2 processes, interleaved A B A B.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from trainer.launcher.quiet import environ_of

from .common import WORK, Figure, base_env, figure, interleaved
from .datasets import digits

NAME = "hang"
NCCL_DEFAULT_S = 600.0  # torch's default process-group timeout for NCCL; gloo's (and timeout_s's) is 1800 s


def _worker(rank: int, marker: str) -> int | None:
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            env = environ_of(int(entry.name))
            if env.get("BENCH_HANG") == marker and env.get("RANK") == str(rank) and "LOCAL_RANK" in env:
                return int(entry.name)
    return None


def _steps(out: Path) -> int:
    path = out / "metrics.jsonl"
    rows = [json.loads(x) for x in path.read_text().splitlines() if x.strip()] if path.exists() else []
    return max((r["step"] for r in rows if r.get("kind") == "train"), default=0)


def detect_once(hang_timeout: int | None, rep: int) -> dict[str, float]:
    """Seconds from the last completed step to failure.json after SIGSTOP of rank 1."""
    out = WORK / "hang" / f"run-{rep}"
    shutil.rmtree(out, ignore_errors=True)
    marker = f"{os.getpid()}-{rep}-{time.monotonic_ns()}"
    cmd = [sys.executable, "-m", "trainer.launch", "--platform", "local", "--nproc-per-node", "2", "--",
           sys.executable, "-m", "trainer.train", "--model", "digits", "--train-data", str(digits()),
           "--epochs", "1000", "--log-every", "5", "--checkpoint-every", "100000", "--output-dir", str(out)]  # fmt: skip
    if hang_timeout is not None:
        cmd += ["--hang-timeout", str(hang_timeout)]
    proc = subprocess.Popen(cmd, env=base_env(BENCH_HANG=marker), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 300
        while _steps(out) < 40:
            if time.monotonic() > deadline or proc.poll() is not None:
                raise RuntimeError(f"the run did not reach 40 steps (exit {proc.poll()})")
            time.sleep(0.1)
        pid = _worker(1, marker)
        if pid is None:
            raise RuntimeError("rank 1's worker not found")
        os.kill(pid, signal.SIGSTOP)
        stopped = time.time()
        record_path = out / "failure.json"
        while not record_path.exists():
            if time.monotonic() > deadline + 600:
                raise RuntimeError("no failure.json")
            time.sleep(0.1)
        record = json.loads(record_path.read_text())
        proc.wait(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
        pid = _worker(1, marker)
        if pid is not None:
            os.kill(pid, signal.SIGKILL)
    last = max(r["step_at"] for r in record["ranks"] if r["answered"])
    if [s["rank"] for s in record["suspects"]] != [1]:
        raise RuntimeError(f"the record names {record['suspects']}, not rank 1")
    return {"detected_s": record["time"] - last, "after_stop_s": record["time"] - stopped,
            "limit_s": record["hang_timeout_s"]}  # fmt: skip


INERT = """
import timeit, sys
from trainer import failpoints
n = int(sys.argv[1])
t = timeit.timeit("if failpoints.ACTIVE: failpoints.hit('compute')", globals=globals(), number=n)
print(t / n * 1e9)
"""

ALLREDUCE = """
import sys, time, torch, torch.distributed as dist
n = int(sys.argv[1])
dist.init_process_group("gloo")
t = torch.ones(1000)
for _ in range(n // 10):
    dist.all_reduce(t)
t0 = time.perf_counter()
for _ in range(n):
    dist.all_reduce(t)
if dist.get_rank() == 0:
    print((time.perf_counter() - t0) / n * 1e6)
dist.barrier()
dist.destroy_process_group()
"""


def inert_ns(spec: str | None, calls: int = 2_000_000) -> float:
    env = base_env()
    env.pop("TRAINER_FAILPOINTS", None)
    if spec:
        env["TRAINER_FAILPOINTS"] = spec
    argv = [sys.executable, "-c", INERT, str(calls)]
    done = subprocess.run(argv, env=env, capture_output=True, text=True, check=True)
    return float(done.stdout)


def allreduce_us(buffer: str, calls: int = 1000) -> float:
    script = WORK / "hang" / "allreduce.py"
    script.parent.mkdir(parents=True, exist_ok=True)
    script.write_text(ALLREDUCE)
    argv = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2", str(script),
            str(calls)]  # fmt: skip
    done = subprocess.run(argv, env=base_env(TORCH_FR_BUFFER_SIZE=buffer), capture_output=True, text=True, check=True)
    return float(done.stdout.split()[-1])


def run(quick: bool = False) -> list[Figure]:
    figs: list[Figure] = []
    reps, short = (1, 5) if quick else (3, 10)  # quick: a check that it runs (tests/bench), so a shorter wait
    cases: list[tuple[int | None, str]] = [(short, f"hang_timeout: {short}")]
    if not quick:
        cases.insert(0, (None, "default (adaptive) hang_timeout"))
    for hang_timeout, label in cases:
        rows = [detect_once(hang_timeout, i) for i in range(reps)]
        detail: dict[str, Any] = {"rows": [{k: round(v, 2) for k, v in r.items()} for r in rows]}
        figs.append(figure(NAME, f"hang reported after the last step, {label}", [r["detected_s"] for r in rows],
                           unit="s", target=f"< {NCCL_DEFAULT_S:g}", detail=detail,
                           note=f"limit {rows[0]['limit_s']:g} s; torch's default timeout 1800 s, NCCL's 600 s; "
                                "digits, 2 gloo processes, rank 1 SIGSTOPped after 40 steps"))  # fmt: skip
    n = 200_000 if quick else 2_000_000  # quick: a check that it runs (tests/bench), fewer calls and repetitions
    calls = {"unset": lambda: inert_ns(None, n), "another point named": lambda: inert_ns("checkpoint-publish=off", n)}
    got = interleaved(calls, reps=1 if quick else 7, warmup=0)
    for case, values in got.items():
        figs.append(figure(NAME, f"failpoint call site, TRAINER_FAILPOINTS {case}", values, unit="ns",
                           note="one call site runs per micro-step (compute); the checkpoint ones once per save, "
                                "the heartbeat one per beat; a digits step is ~5 ms (the trainer benchmark)"))  # fmt: skip
    reduces = 200 if quick else 1000
    recorder = interleaved({"on": lambda: allreduce_us("2000", reduces), "off": lambda: allreduce_us("0", reduces)},
                           reps=1 if quick else 5, warmup=0)  # fmt: skip
    ratios = [a / b for a, b in zip(recorder["on"], recorder["off"], strict=True)]
    figs.append(figure(NAME, "gloo all-reduce time, flight recorder on (2000 entries) / off", ratios, unit="x",
                       detail={"on_us": recorder["on"], "off_us": recorder["off"], "all_reduces": reduces},
                       note="1,000 floats, 2 processes; the launcher turns the recorder on for every worker"))  # fmt: skip
    shutil.rmtree(WORK / "hang", ignore_errors=True)
    return figs

"""`python -m bench --gpu --profile`: where the trainer's step time goes, next to the textbook loop's.

Each loop runs once more under bench/probe with BENCH_PROFILE set: steady-state steps traced by
`torch.profiler` in two windows (bench/probe/sitecustomize.py).

- **kernels** (no Python stacks, so the host runs at its own speed): the device's busy share of the
  window (the union of kernels, copies and sets), its time a step, and every call that makes the host
  wait for the device (`cudaStreamSynchronize`, a device-to-host copy, ...), named by the operator
  that made it (`aten::_local_scalar_dense` is a `float(tensor)` or `.item()`).
- **python** (`with_stack`: every Python call is traced): the loop's own time by region, each call
  the loop function makes (loader, forward, backward, optimizer, metrics window, hang watch, stop
  vote, ...) in ms a step, the same one level into the trainer's `train_step`, and the trainer's own
  functions wherever they ran (the grad-ready hooks autograd calls, its threads). Tracing slows
  every Python call, so read these as shares of the loop, not as speeds.

The traces are kept, gzipped, beside the summary (`BENCH_GPU_PROFILE_DIR`, default
WORK/gpu-profile): open one in Perfetto (ui.perfetto.dev) or chrome://tracing.
"""

from __future__ import annotations

import gzip
import json
import re
import shutil
from collections import Counter, defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

GPU_CATS = ("kernel", "gpu_memcpy", "gpu_memset")
SYNC_CALLS = ("cudaStreamSynchronize", "cudaDeviceSynchronize", "cudaEventSynchronize")
BLOCKING_COPY = re.compile(r"DtoH|Pageable")  # the host waits for these copies (CUDA's memcpy behaviour)
LOOPS = {"trainer": ("trainer/training/loop.py", "run"), "textbook": ("textbook_gpu.py", "main")}
INNER = {"trainer": ("trainer/training/loop.py", "train_step")}

Trace = dict[str, Any]
Runner = Callable[[str, dict[str, str]], None]


def windows(warmup: int, steps: int) -> str:
    """BENCH_PROFILE for a run of `steps`: kernels over a third of the steady state, then 5 steps with stacks."""
    span = max(2, (steps - warmup) // 3)
    start = warmup + 5
    return f"{start}-{start + span},{start + span + 5}-{start + span + 10}"


def profile(run: Runner, kinds: dict[str, str], warmup: int, steps: int, out: Path) -> dict[str, Any]:
    """Profile each loop: `kinds` maps a name (trainer, textbook, or one of theirs such as trainer-compile) to
    the run kind `run(kind, env)` starts."""
    shutil.rmtree(out, ignore_errors=True)
    got: dict[str, Any] = {}
    for name, kind in kinds.items():
        folder = out / name
        folder.mkdir(parents=True)
        run(kind, {"BENCH_PROFILE": windows(warmup, steps), "BENCH_PROFILE_OUT": str(folder)})
        got[name] = summarise(folder, name)
    (out / "summary.json").write_text(json.dumps(got, indent=2) + "\n")
    return got


def summarise(folder: Path, name: str) -> dict[str, Any]:
    """The two windows' summaries of one loop; the traces are gzipped in place."""
    summary: dict[str, Any] = {}
    for window, read in (("kernels", device_summary), ("python", lambda t: loop_regions(t, name))):
        (path,) = folder.glob(f"{window}-*.json")  # the rank-0 worker's: the only process that steps
        summary[window] = read(json.loads(path.read_text()))
        with path.open("rb") as src, gzip.open(path.with_suffix(".json.gz"), "wb") as dst:
            shutil.copyfileobj(src, dst)
        path.unlink()
    return summary


def optimizer_steps(events: list[dict[str, Any]]) -> int:
    """Optimizer steps in the window: torch's own `Optimizer.step#...` annotation, once a step."""
    return sum(1 for e in events if e.get("cat") == "user_annotation" and e["name"].startswith("Optimizer.step#"))


def union_us(spans: list[tuple[float, float]]) -> float:
    """The length of the union of [start, end) spans."""
    total, reach = 0.0, float("-inf")
    for start, end in sorted(spans):
        if end > reach:
            total += end - max(start, reach)
            reach = end
    return total


def device_summary(trace: Trace) -> dict[str, Any]:
    """The kernels window: the device's busy share and step time, and what made the host wait for it."""
    events = [e for e in trace["traceEvents"] if e.get("ph") == "X"]
    steps = optimizer_steps(events)
    spans = [(e["ts"], e["ts"] + e["dur"]) for e in events if e.get("cat") in GPU_CATS]
    copies = {e["args"].get("correlation"): e["name"] for e in events if e.get("cat") == "gpu_memcpy"}
    waits = [e for e in events if e.get("cat") == "cuda_runtime" and is_wait(e, copies)]
    ops = sorted((e for e in events if e.get("cat") == "cpu_op"), key=lambda e: e["ts"])
    by_op = Counter(enclosing(ops, w) for w in waits)
    out: dict[str, Any] = {"steps": steps, "waits_per_step": round(len(waits) / max(steps, 1), 2),
                           "wait_ms_per_step": round(sum(w["dur"] for w in waits) / max(steps, 1) / 1e3, 3),
                           "waits_by_op": dict(by_op.most_common())}  # fmt: skip
    if spans and steps:
        span = max(e for _, e in spans) - min(s for s, _ in spans)
        out |= {"device_ms_per_step": round(span / steps / 1e3, 3),
                "busy_ms_per_step": round(union_us(spans) / steps / 1e3, 3),
                "busy_share": round(union_us(spans) / span, 4), "kernels_per_step": round(len(spans) / steps, 1)}  # fmt: skip
    return out


def is_wait(event: dict[str, Any], copies: dict[Any, str]) -> bool:
    """A runtime call that blocks the host until the device catches up."""
    if event["name"] in SYNC_CALLS:
        return True
    copy = copies.get(event.get("args", {}).get("correlation"))
    return event["name"].startswith("cudaMemcpy") and copy is not None and bool(BLOCKING_COPY.search(copy))


def enclosing(ops: list[dict[str, Any]], event: dict[str, Any]) -> str:
    """The innermost CPU operator on the event's thread that contains it ('-' when none does)."""
    best = "-"
    for op in ops:
        if op["ts"] > event["ts"]:
            break
        if op.get("tid") == event.get("tid") and op["ts"] + op["dur"] >= event["ts"] + event["dur"]:
            best = op["name"]
    return best


def key(name: str) -> str:
    """'trainer/training/metrics.py(105): on_step' -> 'trainer/training/metrics.py: on_step': the line, and a built-in's
    address, drop out."""
    return re.sub(r" at 0x[0-9a-f]+>$", ">", re.sub(r"\(\d+\): ", ": ", name))


def loop_regions(trace: Trace, name: str) -> dict[str, Any]:
    """The python window: each call the loop function makes, in ms a step, largest first."""
    events = [e for e in trace["traceEvents"] if e.get("ph") == "X"]
    steps = optimizer_steps(events)
    calls = [e for e in events if e.get("cat") == "python_function"]
    children: dict[Any, list[dict[str, Any]]] = defaultdict(list)
    for e in calls:
        children[e["args"].get("Python parent id")].append(e)

    def regions(where: tuple[str, str]) -> dict[str, float]:
        file, func = where
        parents = [e for e in calls if key(e["name"]).endswith(f"{file}: {func}")]
        per: Counter[str] = Counter()
        for parent in parents:
            for child in children[parent["args"].get("Python id")]:
                per[key(child["name"])] += child["dur"]
        total = sum(p["dur"] for p in parents)
        inside = {k: round(v / steps / 1e3, 3) for k, v in per.most_common()}
        return {"total_ms_per_step": round(total / max(steps, 1) / 1e3, 3), **inside}

    def anywhere() -> dict[str, float]:
        """The trainer's own functions wherever they ran (hooks autograd calls, its threads), inclusive;
        the loop and the calls it is inside are left out."""
        by_id = {e["args"].get("Python id"): e for e in calls}
        around: set[str] = set()
        for e in (e for e in calls if key(e["name"]).endswith(": ".join(LOOPS[name.split("-")[0]]))):
            while e is not None:
                around.add(key(e["name"]))
                e = by_id.get(e["args"].get("Python parent id"))
        per: Counter[str] = Counter()
        for e in calls:
            if key(e["name"]).startswith("trainer/") and key(e["name"]) not in around:
                per[key(e["name"])] += e["dur"]
        return {k: round(v / max(steps, 1) / 1e3, 3) for k, v in per.most_common()}

    loop = name.split("-")[0]  # trainer-compile: the trainer's loop
    out: dict[str, Any] = {"steps": steps, "loop": regions(LOOPS[loop]), "trainer_functions": anywhere()}
    if loop in INNER:
        out["step"] = regions(INNER[loop])
    return out

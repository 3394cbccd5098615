"""Where the 98M transformer's step goes on a GPU, variant by variant, in one process (`bench --gpu`, issue 40).

The launcher runs of bench/gpu.py say how the trainer compares with the textbook loop; they cannot say why
`compile: true` did not shorten the step (H200, 2026-11-27: compiled 37-43 ms against eager 36). This child
times the same model, batch, bf16 autocast and AdamW with one thing changed at a time, in a one-rank NCCL
group: eager with the tutorial's AdamW (foreach) and with the fused one the trainer uses on CUDA; compiled
(inductor's default, nanoGPT's order: compile, then DDP) and compiled without DDP (DDP makes dynamo split the
graph at its buckets), eager without DDP, and compiled with CUDA graphs (`mode="reduce-overhead"`, no DDP:
what launching costs); and, for eager and compiled, the kernels that took the device's time over a few
profiled steps. Each variant reports the step's wall time between two synchronizes and the launching thread's
CPU time a step: CPU time close to the wall time means the host, not the device, sets the pace.

`python -m bench.gpu_variants STEPS [LAYERS] [NAME PART...]` prints one JSON line (only the variants whose
names hold a NAME PART, when given). Without CUDA it runs on the CPU (gloo,
no autocast kernels to list): a check that it runs, as tests/bench does with 1 layer.
"""

from __future__ import annotations

import gc
import json
import sys
import time
from collections.abc import Callable
from typing import Any

from .common import WORK, Figure, figure, unavailable

NAME = "gpu"
BATCH = 32
VARIANTS: dict[str, dict[str, Any]] = {
    "eager, AdamW foreach (the textbook's)": {"compile": False, "fused": False, "ddp": True},
    "eager, AdamW fused (the trainer's on CUDA)": {"compile": False, "fused": True, "ddp": True},
    "compiled, AdamW fused, DDP": {"compile": True, "fused": True, "ddp": True, "profile": True},
    "compiled, AdamW fused, no DDP": {"compile": True, "fused": True, "ddp": False},
    "eager, AdamW fused, no DDP": {"compile": False, "fused": True, "ddp": False},
    "compiled, AdamW fused, DDP, dynamo's DDP optimizer off (one graph)": {
        "compile": True,
        "fused": True,
        "ddp": True,
        "optimize_ddp": False,
    },
    "compiled reduce-overhead (CUDA graphs), AdamW fused, no DDP": {
        "compile": "reduce-overhead",
        "fused": True,
        "ddp": False,
        "cuda_only": True,
    },
}
PROFILED = ("eager, AdamW fused (the trainer's on CUDA)", "compiled, AdamW fused, DDP")


def top_kernels(step: Callable[[], None], steps: int = 5, top: int = 12) -> dict[str, float]:
    """Device milliseconds a step of the `top` kernels (by total device time) over `steps` profiled steps."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(steps):
            step()
        torch.cuda.synchronize()
    rows = [(e.key, e.device_time_total) for e in prof.key_averages() if e.device_time_total > 0]
    total = sum(t for _, t in rows)
    out = {k[:90]: round(t / 1e3 / steps, 3) for k, t in sorted(rows, key=lambda r: -r[1])[:top]}
    return {"all kernels": round(total / 1e3 / steps, 3), **out}


def one(name: str, spec: dict[str, Any], steps: int, layers: int, warmup: int = 10) -> dict[str, Any]:
    import torch
    from torch.nn.parallel import DistributedDataParallel as DDP
    from trainer.examples.transformer import DEFAULTS, TokenClassifier

    torch.manual_seed(0)
    cuda = torch.cuda.is_available()
    device = torch.device("cuda", 0) if cuda else torch.device("cpu")
    module = TokenClassifier(**{**DEFAULTS, "layers": layers}).to(device)
    torch._dynamo.config.optimize_ddp = spec.get("optimize_ddp", True)  # False: no graph split at DDP's buckets
    mode = spec["compile"] if isinstance(spec["compile"], str) else None
    model: Any = torch.compile(module, mode=mode) if spec["compile"] else module
    if spec["ddp"]:
        model = DDP(model, device_ids=[0] if cuda else None)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=spec["fused"])
    x = torch.randint(0, DEFAULTS["vocab"], (BATCH, DEFAULTS["seq"]), device=device)
    y = torch.randint(0, DEFAULTS["vocab"], (BATCH,), device=device)

    def step() -> None:
        with torch.autocast(device.type, dtype=torch.bfloat16):
            loss = torch.nn.functional.cross_entropy(model(x).float(), y)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()

    started = time.perf_counter()
    for _ in range(warmup):
        step()
    sync()
    warm_s = time.perf_counter() - started
    t0, c0 = time.perf_counter(), time.thread_time()
    for _ in range(steps):
        step()
    cpu_s = time.thread_time() - c0
    sync()
    wall_s = time.perf_counter() - t0
    got = {"step_ms": round(wall_s / steps * 1e3, 3), "host_cpu_ms": round(cpu_s / steps * 1e3, 3),
           "warmup_s": round(warm_s, 2), "peak_mib": round(torch.cuda.max_memory_allocated() / 2**20) if cuda else None}  # fmt: skip
    if name in PROFILED and cuda:
        got["kernels_ms"] = top_kernels(step)
    return got


def sync() -> None:
    import torch

    if torch.cuda.is_available():
        torch.cuda.synchronize()


def child(steps: int, layers: int, only: list[str]) -> dict[str, Any]:
    import torch
    import torch.distributed as dist

    cuda = torch.cuda.is_available()
    if cuda:
        torch.cuda.set_device(0)
    work = WORK / "gpu-variants"
    work.mkdir(parents=True, exist_ok=True)
    (work / "pg").unlink(missing_ok=True)
    dist.init_process_group("nccl" if cuda else "gloo", init_method=f"file://{work / 'pg'}", rank=0, world_size=1,
                            device_id=torch.device("cuda", 0) if cuda else None)  # fmt: skip
    out: dict[str, Any] = {}
    for name, spec in VARIANTS.items():
        if (spec.get("cuda_only") and not cuda) or (only and not any(o in name for o in only)):
            continue
        try:
            out[name] = one(name, spec, steps, layers)
        except Exception as exc:  # one variant failing leaves the others standing
            out[name] = {"error": f"{type(exc).__name__}: {str(exc)[:500]}"}
        print(f"   {name}: {out[name]}", file=sys.stderr, flush=True)
        gc.collect()  # the variant's model and optimizer, before the next one's
        if cuda:
            torch.cuda.empty_cache()
            torch.cuda.reset_peak_memory_stats()
        torch._dynamo.reset()
    dist.barrier()
    dist.destroy_process_group()
    return out


def variant_figures(got: dict[str, Any], peak: float, flops: float) -> list[Figure]:
    """One step-time figure a variant, MFU in its note, host CPU time and top kernels in its detail."""
    out = []
    for name, r in got.items():
        if "error" in r:
            out.append(unavailable(NAME, f"in-process step time: {name}", r["error"], unit="ms"))
            continue
        mfu = flops / (r["step_ms"] / 1e3) / 1e12 / peak * 100
        out.append(figure(NAME, f"in-process step time: {name}", [r["step_ms"]], unit="ms",
                          note=f"MFU {mfu:.1f}%; the launching thread's CPU {r['host_cpu_ms']} ms a step",
                          detail={k: v for k, v in r.items() if k != "step_ms"}))  # fmt: skip
    return out


if __name__ == "__main__":
    from trainer.examples.transformer import DEFAULTS

    layers = int(sys.argv[2]) if len(sys.argv) > 2 and sys.argv[2].isdigit() else DEFAULTS["layers"]
    print(json.dumps(child(int(sys.argv[1]), layers, [a for a in sys.argv[2:] if not a.isdigit()])))

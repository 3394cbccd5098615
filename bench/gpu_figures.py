"""The figures of `python -m bench --gpu` (bench/gpu.py) from its runs' results: step-time ratios, MFU,
data wait, memory, first step, checkpoint throughput, and the optional compile, base and profile ones."""

from __future__ import annotations

import os
from typing import Any

from .common import Figure, figure, unavailable

NAME = "gpu"
BATCH = 32
H100_SXM_BF16_DENSE_TFLOPS = 989.0  # NVIDIA H100 datasheet, SXM5, bf16 Tensor Core without sparsity
BASE_ENV = "BENCH_GPU_BASE"
COMPILE_ENV = "BENCH_GPU_COMPILE"


def figures(
    got: dict[str, list[dict[str, Any]]],
    peak: float,
    ck: dict[str, Any],
    steps: int,
    warmup: int,
    device: str,
    profiled: dict[str, Any] | None = None,
) -> list[Figure]:
    """Every figure of the run."""
    from trainer.examples.transformer import DEFAULTS, train_flops_per_sample

    trainer, textbook, fast = got["trainer"], got["textbook"], got["trainer-nondeterministic"]
    textbook_det = got["textbook-deterministic"]
    flops = train_flops_per_sample({}) * BATCH
    gb = ck["bytes"] / 1e9
    setup = (f"{device}; transformer {ck['params'] / 1e6:.0f}M parameters ({DEFAULTS}), bf16 autocast, AdamW, batch "
             f"{BATCH}, 1 process (NCCL); steps {warmup + 1}-{steps}, no checkpoint in the window; at one rank the trainer "
             "trains the bare model (no DDP wrapper) with fused AdamW, the textbook wraps DDP with the tutorial's "
             "AdamW")  # fmt: skip
    ms = {k: [round(r["step_s"] * 1e3, 3) for r in v] for k, v in got.items()}
    return [
        figure(NAME, "step time, trainer / textbook DDP loop (same GPU)",
               [a["step_s"] / b["step_s"] for a, b in zip(trainer, textbook, strict=True)], unit="x", target="<= 1.03",
               note=setup + "; trainer with deterministic: true (the default before issue 40)", detail={"step_ms": ms}),
        figure(NAME, "step time, trainer deterministic: false / textbook",
               [a["step_s"] / b["step_s"] for a, b in zip(fast, textbook, strict=True)], unit="x", target="<= 1.03",
               note="like for like, and the default settings: deterministic: auto is false on CUDA, and the textbook "
               "loop does not turn deterministic algorithms on"),
        figure(NAME, "step time, trainer / textbook loop + deterministic algorithms",
               [a["step_s"] / b["step_s"] for a, b in zip(trainer, textbook_det, strict=True)], unit="x", target="<= 1.03",
               note="like for like with the default: both turn torch's deterministic algorithms on"),
        figure(NAME, "step time, textbook + deterministic algorithms / textbook",
               [a["step_s"] / b["step_s"] for a, b in zip(textbook_det, textbook, strict=True)], unit="x",
               note="what torch's deterministic algorithms cost this model without the trainer"),
        figure(NAME, "step time, trainer deterministic: false / true (the default)",
               [a["step_s"] / b["step_s"] for a, b in zip(fast, trainer, strict=True)], unit="x",
               note="below 1 is the speed-up of giving up the bit-identical resume; the figure's name is kept for the "
               "comparison with earlier runs: since issue 40 the default, auto, is false on CUDA"),
        figure(NAME, "trainer step time", [r["step_s"] * 1e3 for r in fast], unit="ms"),
        figure(NAME, "textbook step time", [r["step_s"] * 1e3 for r in textbook], unit="ms"),
        figure(NAME, "trainer samples/s", [BATCH / r["step_s"] for r in fast], unit="samples/s",
               note=f"{DEFAULTS['seq']} tokens a sample",
               detail={"deterministic_true": [round(BATCH / r["step_s"], 1) for r in trainer]}),
        figure(NAME, "model FLOPs utilisation vs measured bf16 peak", [flops / r["step_s"] / 1e12 / peak * 100 for r in fast],
               unit="%", note=f"{flops / 1e12:.2f} TFLOP a step (PaLM's count); peak {peak:.0f} TFLOP/s measured "
               "(8192^3 bf16 matmul, median of 30); the trainer's default (deterministic: auto, false on CUDA)",
               detail={"measured_peak_tflops": round(peak, 1),
                       "deterministic_true_percent": [round(flops / r["step_s"] / 1e12 / peak * 100, 1) for r in trainer]}),
        figure(NAME, "model FLOPs utilisation vs datasheet bf16 dense (989 TFLOP/s, H100 SXM)",
               [flops / r["step_s"] / 1e12 / H100_SXM_BF16_DENSE_TFLOPS * 100 for r in fast], unit="%",
               note=f"the datasheet figure is for the H100 SXM; this device is {device}"),
        figure(NAME, "data-wait share of step time (trainer's metrics)",
               [r["data_wait_s"] / r["step_s"] * 100 for r in fast], unit="%", target="< 1"),
        figure(NAME, "trainer's own step_time_s / step time", [r["own_step_s"] / r["step_s"] for r in fast],
               unit="x", note="1.0 means metrics.jsonl's step_time_s is honest on a GPU",
               detail={"probe_over_step_time": [round(r["probe_step_s"] / r["step_s"], 4) for r in fast]}),
        figure(NAME, "peak GPU memory, trainer", [r["peak_mem_mb"] for r in fast], unit="MiB",
               note="torch.cuda.max_memory_allocated", detail={"textbook_mib": [round(r["peak_mem_mb"]) for r in textbook]}),
        figure(NAME, "first-step latency: launcher start -> first optimizer step done", [r["first_step_s"] for r in fast],
               unit="s", target="< 10", detail={"first_step_alone_s": [round(r["first_step_alone_s"], 3) for r in fast],
                       "phases_s": [r.get("first_step_phases") for r in fast]}),
        figure(NAME, "checkpoint save from GPU (trainer.checkpoint.files.save)", [gb / s for s in ck["save_s"]],
               unit="GB/s", note=f"{gb:.2f} GB: model + AdamW state, on the GPU; fsync'd",
               detail={"seconds": [round(s, 3) for s in ck["save_s"]]}),
        figure(NAME, "plain torch.save of the same state + fsync", [gb / s for s in ck["plain_s"]], unit="GB/s",
               detail={"seconds": [round(s, 3) for s in ck["plain_s"]]}),
        figure(NAME, "checkpoint save throughput, trainer / plain torch.save",
               [p / s for s, p in zip(ck["save_s"], ck["plain_s"], strict=True)], unit="x", target=">= 0.5"),
        figure(NAME, "the disk's plain sequential write (one file of the checkpoint's size, fsync'd)",
               [gb / s for s in ck["disk_s"]], unit="GB/s", note="from host memory, one write() + fsync, "
               "interleaved with the saves in the same run", detail={"seconds": [round(s, 3) for s in ck["disk_s"]]}),
        figure(NAME, "checkpoint save from GPU / the disk's plain write",
               [d / s for s, d in zip(ck["save_s"], ck["disk_s"], strict=True)], unit="x", target=">= 0.8",
               note="throughput ratio: 1.0 is a checkpoint written at the disk's own speed"),
        figure(NAME, "async checkpoint: blocking time", [s * 1e3 for s in ck["async_blocked_s"]], unit="ms",
               note="checkpoint_async: true; the device-to-host copy into the reused staging buffer + hand-over",
               detail={"background_write_s": [round(s, 3) for s in ck["async_write_s"]],
                       "blocked_over_sync_save": [round(b / s, 4) for b, s in zip(ck["async_blocked_s"], ck["save_s"], strict=True)]}),
        *compile_figures(got, peak, flops),
        *base_figures(got),
        *gpu_profile_figures(profiled),
    ]  # fmt: skip


def base_figures(got: dict[str, list[dict[str, Any]]]) -> list[Figure]:
    """With BENCH_GPU_BASE: the working tree's trainer against the earlier one, both deterministic: false."""
    if "trainer-base" not in got:
        return []
    now, base, textbook = got["trainer-nondeterministic"], got["trainer-base"], got["textbook"]
    return [
        figure(NAME, "step time, trainer / the BENCH_GPU_BASE trainer (both deterministic: false)",
               [a["step_s"] / b["step_s"] for a, b in zip(now, base, strict=True)], unit="x",
               note=f"the base: {os.environ.get(BASE_ENV)}"),
        figure(NAME, "step time, the BENCH_GPU_BASE trainer deterministic: false / textbook",
               [a["step_s"] / b["step_s"] for a, b in zip(base, textbook, strict=True)], unit="x",
               detail={"step_ms": [round(r["step_s"] * 1e3, 3) for r in base]}),
    ]  # fmt: skip


def gpu_profile_figures(profiled: dict[str, Any] | None) -> list[Figure]:
    """With --profile: the device's busy share and the host's waits, trainer and textbook (one profiled run each)."""
    if profiled is None:
        return []
    if "error" in profiled:
        return [unavailable(NAME, "profile: device busy share of the trainer's steady state", profiled["error"])]
    t, b = profiled["trainer"]["kernels"], profiled["textbook"]["kernels"]
    return [
        figure(NAME, "profile: device busy share of the trainer's steady state", [t.get("busy_share", 0) * 100],
               unit="%", note="union of kernels, copies and sets over the traced window; the textbook's in detail",
               detail={"textbook_percent": round(b.get("busy_share", 0) * 100, 2), "profile": profiled}),
        figure(NAME, "profile: host waits for the device, trainer, a step", [t["waits_per_step"]], unit="calls",
               note="synchronize calls and device-to-host copies", detail={"textbook": b["waits_per_step"],
               "trainer_by_op": t["waits_by_op"], "textbook_by_op": b["waits_by_op"]}),
    ]  # fmt: skip


def compile_figures(got: dict[str, list[dict[str, Any]]], peak: float, flops: float) -> list[Figure]:
    """The compile: true figures (issue 40), or why they are missing."""
    names = ("step time, trainer / textbook, compile: true on both",
             "model FLOPs utilisation vs measured bf16 peak, compile: true + token shards",
             "data-wait share of step time, compile: true + token shards",
             "first-step latency with compile: true: launcher start -> first optimizer step done")  # fmt: skip
    if "trainer-compile" not in got:
        return [unavailable(NAME, n, f"set {COMPILE_ENV}=1 to run the compiled kinds") for n in names]
    trainer, textbook = got["trainer-compile"], got["textbook-compile"]
    return [
        figure(NAME, names[0], [a["step_s"] / b["step_s"] for a, b in zip(trainer, textbook, strict=True)], unit="x",
               target="<= 1.03", note="both torch.compile, deterministic off; the trainer reads token shards, the "
               "textbook its records as tensors in memory",
               detail={"step_ms": {"trainer": [round(r["step_s"] * 1e3, 3) for r in trainer],
                                   "textbook": [round(r["step_s"] * 1e3, 3) for r in textbook]}}),
        figure(NAME, names[1], [flops / r["step_s"] / 1e12 / peak * 100 for r in trainer], unit="%", target=">= 40"),
        figure(NAME, names[2], [r["data_wait_s"] / r["step_s"] * 100 for r in trainer], unit="%", target="< 1"),
        figure(NAME, names[3], [r["first_step_s"] for r in trainer], unit="s",
               note="the compile seconds are inside it (detail); target: under 10 s before compile time",
               detail={"compile_s": [r["compile_s"] for r in trainer],
                       "before_compile_s": [round(r["first_step_s"] - (r["compile_s"] or 0), 3) for r in trainer]}),
    ]  # fmt: skip

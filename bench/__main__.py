"""`python -m bench [--quick] [--only NAMES] [--out FILE] [--docs FILE]`: run the benchmarks, print a
table, write the results as JSON and (full runs) the table in docs/benchmarks.md.

`python -m bench --gpu [--profile]`: the GPU benchmark alone (bench/gpu.py, needs CUDA), into
bench/results-gpu.json and the GPU table of docs/benchmarks.md; `--profile` adds torch.profiler traces of
the trainer's and the textbook's steady state (bench/gpu_profile.py).

Benchmarks: trainer (step time vs a textbook DDP loop), jsonl (streaming reader), checkpoint,
drive (CLI wall times vs interpreter start-up and TorchX), scale (1,000-job renders, `list` over
10,000 and 100,000 runs, concurrent writers, SLURM at 1,024 nodes, 8-1,024 stand-in ranks:
docs/scale.md), first_step (submit -> first completed step), hang (time to report a hang, and what the
watchdog's helpers cost when nothing fails), recovery (a retried run's time from a fault to training again,
and its goodput), function (what Job.with_function adds from submit to the value back, against the same
program as a command: job), rendezvous (torch's c10d rendezvous handler with N stand-in agents), k8s
(`trainctl status` of a 1,024-pod TrainJob on the test API server), sweep (a 1,000-trial SLURM array and
`sweep status` over it; these three: docs/scale.md), ranks (the stand-in ranks of `scale` alone), s3data (staging
against boto3's download_file, streaming from S3 against a local file, S3 bytes per rank: moto's server), and render
(the rendering part of `scale` alone: fast,
used by the smoke test).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

from .common import ROOT, Figure, load_average
from .drift import carry_over, compare, keep_records, load_previous
from .report import DOCS, markdown_table, update_docs

RESULTS = ROOT / "bench" / "results.json"
RESULTS_GPU = ROOT / "bench" / "results-gpu.json"


def _render_only(quick: bool) -> list[Figure]:
    """The 1,000-job render figure alone (no registry, no subprocesses)."""
    from . import scale

    return scale.run_render(quick)


def registry() -> dict[str, Callable[[bool], list[Figure]]]:
    from . import (
        checkpoint_save,
        drive,
        first_step,
        function_call,
        hang,
        jsonl_input,
        recovery,
        s3_data,
        scale,
        trainer_overhead,
    )
    from .scale import k8s_size, rendezvous, sweep_size
    from .scale.control import run_ranks

    return {
        "trainer": trainer_overhead.run,
        "jsonl": jsonl_input.run,
        "checkpoint": checkpoint_save.run,
        "drive": drive.run,
        "scale": scale.run,
        "ranks": lambda quick: run_ranks(quick, "ranks"),
        "first_step": first_step.run,
        "hang": hang.run,
        "recovery": recovery.run,
        "function": function_call.run,
        "s3data": s3_data.run,
        "rendezvous": rendezvous.run,
        "k8s": k8s_size.run_k8s,
        "sweep": sweep_size.run_sweep,
        "render": _render_only,
    }


def _gpu(quick: bool) -> list[Figure]:
    """bench/gpu.py alone: it needs the trainer and torch, not the SDK the other benchmarks drive."""
    from . import gpu

    return gpu.run(quick)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)  # fmt: skip
    p.add_argument("--quick", action="store_true", help="few repetitions, small sizes: a check that it runs")
    p.add_argument(
        "--only", default="", help="comma-separated benchmark names (default: all but render and ranks, parts of scale)"
    )
    p.add_argument("--gpu", action="store_true", help="the GPU benchmark alone (needs CUDA)")
    p.add_argument("--profile", action="store_true",
                   help="with --gpu: trace the trainer's and the textbook's steady state (bench/gpu_profile.py)")  # fmt: skip
    p.add_argument(
        "--out",
        type=Path,
        default=None,
        help=f"results file (default {RESULTS.relative_to(ROOT)}, with --gpu {RESULTS_GPU.relative_to(ROOT)})",
    )
    p.add_argument("--docs", type=Path, default=None,
                   help=f"rewrite the generated table in this file (default: {DOCS.relative_to(ROOT)} on full runs)")  # fmt: skip
    args = p.parse_args(argv)
    if args.profile:
        if not args.gpu:
            p.error("--profile goes with --gpu")
        os.environ["BENCH_GPU_PROFILE"] = "1"  # read by bench/gpu.py, like its other BENCH_GPU_* settings
    benches = {"gpu": _gpu} if args.gpu else registry()
    names = (
        list(benches)
        if args.gpu
        else [n for n in args.only.split(",") if n] or [n for n in benches if n not in ("render", "ranks")]
    )
    out = args.out or (RESULTS_GPU if args.gpu else RESULTS)
    unknown = [n for n in names if n not in benches]
    if unknown:
        p.error(f"unknown benchmark(s) {', '.join(unknown)}; choose from {', '.join(benches)}")
    started, load_start = time.time(), load_average()
    figures: list[Figure] = []
    runs: dict[str, dict[str, Any]] = {}
    for name in names:
        t0 = time.perf_counter()
        print(f"== {name} ...", file=sys.stderr, flush=True)
        try:
            got = benches[name](args.quick)
            status, error = "ok", None
        except Exception as exc:  # a broken benchmark is reported, the others still run
            got, status, error = [], "error", f"{type(exc).__name__}: {exc}"
            traceback.print_exc()
        figures += got
        seconds = round(time.perf_counter() - t0, 1)
        runs[name] = {"status": status, "error": error, "seconds": seconds, "figures": len(got)}
        print(f"   {name}: {status} in {runs[name]['seconds']} s", file=sys.stderr, flush=True)
    results = {
        "meta": {
            "started_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(started)),
            "duration_s": round(time.time() - started, 1),
            "quick": args.quick,
            "load_avg_1min_start": round(load_start, 2),
            "load_avg_1min_end": round(load_average(), 2),
            "cpus": os.cpu_count(),
            "python": platform.python_version(),
            "torch": _torch_version(),
            **({"device": _device()} if args.gpu else {}),
            "git_commit": _git_commit(),
        },
        "benchmarks": runs,
        "figures": [f.to_json() for f in figures],
    }
    previous = load_previous(out, args.quick)
    compare(results["figures"], previous)
    keep_records(results, previous)
    if args.only:
        carry_over(results, previous)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(results, indent=2) + "\n")
    print(markdown_table(results))
    docs = args.docs if args.docs is not None else (DOCS if not args.quick and not args.only else None)
    if docs is not None:
        update_docs(docs, results, "gpu" if args.gpu else "table")
        print(f"wrote {out} and the table in {docs}", file=sys.stderr)
    else:
        print(f"wrote {out}", file=sys.stderr)
    return 1 if any(r["status"] != "ok" for r in runs.values()) else 0


def _torch_version() -> str | None:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("torch")
    except PackageNotFoundError:
        return None


def _device() -> str:
    from .gpu import device_name

    return device_name()


def _git_commit() -> str | None:
    proc = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True)
    return proc.stdout.strip() or None


if __name__ == "__main__":
    sys.exit(main())

"""Benchmark 1: the built-in trainer's steady-state step time against a textbook DDP loop.

Both run under `torchrun --nproc-per-node 2` (gloo, CPU) on the digits ConvNet, the same JSONL
records, batch size, AdamW and learning rate, inside a pseudo-terminal (so the trainer's
progress bar is on). Step time is taken from the same place in both: a global optimizer
post-hook (bench/probe/sitecustomize.py) stamps the end of every optimizer step; the
steady-state step time is the mean interval after the warm-up steps, which contains
everything the loop does between steps (data, metrics, checkpoints, progress bar).

The trainer turns on torch's deterministic algorithms, which picks other CPU kernels; a second
textbook run with the same switch makes the like-for-like comparison, and a trainer run with
`deterministic: false` measures what the switch costs the trainer itself.
"""

from __future__ import annotations

import json
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from .common import PROBE, ROOT, VENV_BIN, WORK, Figure, base_env, figure
from .datasets import digits
from .pty_run import run_in_pty

NAME = "trainer"
BATCH = 32
COPIES = 8  # 11,504 records: 180 steps per epoch with 2 ranks


def _probe_steps(probe_dir: Path) -> list[list[float]]:
    """Optimizer-step stamps of each worker (processes that stepped), by rank."""
    found: list[tuple[int, list[float]]] = []
    for f in probe_dir.glob("*.json"):
        rec = json.loads(f.read_text())
        if rec.get("steps_perf"):
            found.append((int(rec.get("rank") or 0), rec["steps_perf"]))
    return [steps for _, steps in sorted(found)]


def steady_step_time(stamps: list[float], warmup: int) -> float:
    """Mean seconds per step from the end of step `warmup` to the end of the last step."""
    return (stamps[-1] - stamps[warmup - 1]) / (len(stamps) - warmup)


def run_once(kind: str, steps: int, warmup: int, every: int, tag: str) -> dict[str, Any]:
    """One 2-process run of `kind` (trainer, trainer-nondeterministic, textbook, textbook-deterministic);
    its step time and the trainer's own metrics."""
    run_dir = WORK / "trainer" / tag
    shutil.rmtree(run_dir, ignore_errors=True)
    probe_dir = run_dir / "probe"
    probe_dir.mkdir(parents=True)
    data = digits(COPIES)
    torchrun = [str(VENV_BIN / "torchrun"), "--standalone", "--nproc-per-node", "2"]
    if kind.startswith("trainer"):
        out = run_dir / "output"
        argv = [*torchrun, "-m", "trainer.train", "--model", "digits", "--train-data", str(data),
                "--batch-size", str(BATCH), "--epochs", "100", "--max-steps", str(steps), "--lr", "0.001", "--clip-grad", "0",
                "--lr-schedule", "constant", "--checkpoint-every", str(every), "--log-every", "10",
                "--resume", "never", "--output-dir", str(out), "--backend", "gloo",
                "--deterministic", "false" if kind == "trainer-nondeterministic" else "true"]  # fmt: skip
    else:
        argv = [*torchrun, str(ROOT / "bench" / "textbook_ddp.py"), str(data), str(BATCH), str(steps)]
        argv += ["deterministic"] if kind == "textbook-deterministic" else []
    env = base_env(PYTHONPATH=f"{PROBE}", BENCH_PROBE_DIR=str(probe_dir))
    code, text = run_in_pty(argv, env, run_dir, timeout=300)
    if code != 0:
        raise RuntimeError(f"{kind} run exited {code}:\n{text[-3000:]}")
    per_rank = _probe_steps(probe_dir)
    if len(per_rank) != 2 or any(len(s) != steps for s in per_rank):
        raise RuntimeError(f"{kind}: expected 2 ranks x {steps} step stamps, got {[len(s) for s in per_rank]}")
    result: dict[str, Any] = {"step_s": statistics.fmean(steady_step_time(s, warmup) for s in per_rank)}
    if kind == "trainer":
        result["progress_bar_seen"] = "step/s" in text or "s/step" in text
        records = [json.loads(line) for line in (run_dir / "output" / "metrics.jsonl").read_text().splitlines()]
        window = [r for r in records if r.get("kind") == "train" and r["step"] > warmup]
        result["own_step_s"] = statistics.fmean(r["step_time_s"] for r in window)
        result["own_wait_s"] = statistics.fmean(r["data_wait_s"] for r in window)
        result["checkpoints"] = len([k for k in range(warmup + 1, steps) if k % every == 0])
    shutil.rmtree(run_dir, ignore_errors=True)
    return result


def kernel_cost(rounds: int, steps: int = 50) -> dict[str, list[float]]:
    """CPU seconds per step of the digits ConvNet's forward, backward and AdamW step (batch 32, one
    thread, one process) with deterministic algorithms on and off, in blocks of `steps` steps
    alternating ABBA: what `deterministic: false` changes in the kernels alone, without the
    scheduling noise of two processes on shared cores."""
    import torch
    from trainer.checkpoint.rng import use_deterministic
    from trainer.training.models import resolve

    torch.set_num_threads(1)
    spec = resolve("digits", None)
    model = spec.build({}, (64,), 1)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    x, y = torch.randn(BATCH, 64), torch.randint(0, 10, (BATCH,))

    def block(on: bool) -> float:
        use_deterministic(on)
        t0 = time.process_time()
        for _ in range(steps):
            spec.loss(model(x), y).backward()
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
        return (time.process_time() - t0) / steps

    block(True), block(False)  # warm-up
    got: dict[str, list[float]] = {"true": [], "false": []}
    for i in range(rounds):
        for on in (True, False) if i % 2 else (False, True):
            got[str(on).lower()].append(block(on))
    return got


def run(quick: bool = False) -> list[Figure]:
    reps, warmup, steps, every = (1, 5, 30, 10) if quick else (6, 20, 520, 100)  # quick: a check that it runs
    kinds = ("textbook", "textbook-deterministic", "trainer", "trainer-nondeterministic")
    got: dict[str, list[dict[str, Any]]] = {k: [] for k in kinds}
    for i in range(reps):  # interleaved: load drifts hit every case alike
        for kind in kinds:
            got[kind].append(run_once(kind, steps, warmup, every, f"{kind}-{i}"))
    trainer, textbook, textbook_det = got["trainer"], got["textbook"], got["textbook-deterministic"]
    trainer_fast = got["trainer-nondeterministic"]
    ratios = [a["step_s"] / b["step_s"] for a, b in zip(trainer, textbook, strict=True)]
    ratios_det = [a["step_s"] / b["step_s"] for a, b in zip(trainer, textbook_det, strict=True)]
    wait_share = [r["own_wait_s"] / r["step_s"] for r in trainer]
    own_vs_probe = [r["own_step_s"] / r["step_s"] for r in trainer]
    bar = all(r["progress_bar_seen"] for r in trainer)
    setup = (
        f"digits ConvNet, batch {BATCH}/process, 2 gloo processes, steps {warmup + 1}-{steps} "
        f"(first {warmup} skipped), checkpoint every {every} steps, metrics every 10, progress bar "
        f"{'on (seen on the pty)' if bar else 'NOT seen'}, clip_grad 0 and constant LR like the textbook loop"
    )
    ms = {k: [round(r["step_s"] * 1e3, 3) for r in v] for k, v in got.items()}
    child = subprocess.run([sys.executable, "-m", "bench.trainer_overhead", str(2 if quick else 20)], cwd=ROOT,
                           env=base_env(), capture_output=True, text=True, timeout=300, check=True)  # fmt: skip
    kernels = json.loads(child.stdout.strip().splitlines()[-1])
    return [
        figure(NAME, "step time, trainer / textbook DDP loop", ratios, unit="x", target="<= 1.03", note=setup,
               detail={"step_ms": ms, "checkpoints_in_window": trainer[0]["checkpoints"], "progress_bar_on": bar,
                       "fastest_run_ratio": round(min(ms["trainer"]) / min(ms["textbook"]), 3),
                       "fastest_run_ratio_deterministic": round(min(ms["trainer"]) / min(ms["textbook-deterministic"]), 3)}),
        figure(NAME, "step time, trainer / textbook loop + deterministic algorithms", ratios_det, unit="x",
               target="<= 1.03", note="like for like: the trainer turns on torch's deterministic algorithms, "
               "which changes CPU kernels"),
        figure(NAME, "step time, trainer deterministic: false / true (the default)",
               [a["step_s"] / b["step_s"] for a, b in zip(trainer_fast, trainer, strict=True)], unit="x",
               note="what the bit-identical resume costs on this CPU; GPU figures (cuDNN benchmarking) not measured here"),
        figure(NAME, "CPU time per step, deterministic: false / true (forward, backward, AdamW)",
               [f / t for f, t in zip(kernels["false"], kernels["true"], strict=True)], unit="x",
               note="the kernels alone: one process, one thread, blocks of 50 steps alternating",
               detail={"cpu_ms_per_step": {k: [round(v * 1e3, 3) for v in vs] for k, vs in kernels.items()}}),
        figure(NAME, "trainer step time", [r["step_s"] * 1e3 for r in trainer], unit="ms"),
        figure(NAME, "trainer deterministic: false step time", [r["step_s"] * 1e3 for r in trainer_fast], unit="ms"),
        figure(NAME, "textbook step time", [r["step_s"] * 1e3 for r in textbook], unit="ms"),
        figure(NAME, "textbook + deterministic step time", [r["step_s"] * 1e3 for r in textbook_det], unit="ms"),
        figure(NAME, "data-wait share of step time (trainer's metrics)", [w * 100 for w in wait_share], unit="%",
               target="< 2", note="metrics.jsonl data_wait_s (rank 0) over the probe's step time"),
        figure(NAME, "trainer's own step_time_s / probe step time", own_vs_probe, unit="x",
               note="1.0 means metrics.jsonl's step_time_s is honest"),
    ]  # fmt: skip


if __name__ == "__main__":
    print(json.dumps(kernel_cost(int(sys.argv[1]))))

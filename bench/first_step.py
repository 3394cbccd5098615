"""Benchmark 6: from `trainctl submit --target local` to the first completed training step.

The digits demo job (examples/digits.yaml, data from bench/.work, 30 steps) is submitted with
`--wait`. The probe (bench/probe/sitecustomize.py, put on PYTHONPATH) stamps, in every process
the run starts, when it started, `import torch`, `init_process_group`, the first forward and
the end of the first optimizer step, so the wall time splits into the stretches below. One more run
with `trainer.compile: true` gives the first step with torch.compile, and the seconds of it spent compiling
(the trainer's summary.json `compile.compile_s`, read from dynamo's compilation metrics).
"""

from __future__ import annotations

import json
import os
import shutil
import statistics
import subprocess
import time
from pathlib import Path
from typing import Any

import yaml

from .common import PROBE, ROOT, VENV_BIN, WORK, Figure, base_env, figure, unavailable
from .datasets import digits, digits_val
from .drive import trainctl_available

NAME = "first_step"
STAGES = (
    ("submit -> worker process started", "t0", "start"),
    ("worker start -> import torch begins", "start", "torch_begin"),
    ("import torch", "torch_begin", "torch_end"),
    ("torch imported -> process group set-up begins", "torch_end", "pg_begin"),
    ("process-group set-up", "pg_begin", "pg_end"),
    ("rest of set-up: data, model, optimizer", "pg_end", "ddp_begin"),
    ("DDP(model): weight broadcast", "ddp_begin", "ddp_end"),
    ("DDP -> first forward (optimizer, resume check, metrics sink, loader)", "ddp_end", "first_forward"),
    ("first step (forward, backward, all-reduce, optimizer)", "first_forward", "first_step"),
)


LAUNCH_TORCH = "of the first stretch: import torch in the launcher / torchrun agent"
DYNAMO = "import torch._dynamo + torch._inductor (for DDP / deterministic mode)"


COMPILED = "submit -> first completed step, compile: true"
COMPILING = "of it: compiling the model (torch.compile, inductor)"


def job_file(work: Path, compile: bool = False) -> Path:
    """examples/digits.yaml with absolute data paths (ours), its own output dir and 30 steps."""
    job = yaml.safe_load((ROOT / "examples" / "digits.yaml").read_text())
    job["data"] = {"train": str(digits()), "val": str(digits_val())}
    job["trainer"]["max_steps"] = 30
    job["trainer"]["compile"] = compile
    job["output_dir"] = str(work / "output")
    job.setdefault("checkpoint", {})["dir"] = str(work / "output" / "checkpoints")
    path = work / "digits.yaml"
    path.write_text(yaml.safe_dump(job, sort_keys=False))
    return path


def run_once(work: Path, compile: bool = False) -> dict[str, float]:
    shutil.rmtree(work, ignore_errors=True)
    probe_dir = work / "probe"
    probe_dir.mkdir(parents=True)
    job = job_file(work, compile)
    path = os.pathsep.join(p for p in (str(PROBE), os.environ.get("PYTHONPATH", "")) if p)  # the probe, then ours
    env = base_env(PYTHONPATH=path, BENCH_PROBE_DIR=str(probe_dir), TRAINCTL_HOME=str(work / "home"))
    t0 = time.time()
    proc = subprocess.run([str(VENV_BIN / "trainctl"), "submit", str(job), "--target", "local", "--wait"],
                          env=env, cwd=work, capture_output=True, text=True, timeout=300)  # fmt: skip
    if proc.returncode != 0:
        raise RuntimeError(f"trainctl submit exited {proc.returncode}: {proc.stdout[-1500:]} {proc.stderr[-1500:]}")
    records = [json.loads(p.read_text()) for p in probe_dir.glob("*.json")]
    workers = [r for r in records if r.get("first_step")]
    if len(workers) != 2:
        raise RuntimeError(f"expected 2 workers with a first step in the probe, found {len(workers)}")
    first = min(workers, key=lambda r: r["first_step"])  # the step ends together on both (all-reduce)
    stamps = {"t0": t0, "start": first["start"], "torch_begin": first["torch_import"][0],
              "torch_end": first["torch_import"][1], "pg_begin": first["pg_init"][0], "pg_end": first["pg_init"][1],
              "ddp_begin": first["ddp_init"][0], "ddp_end": first["ddp_init"][1],
              "first_forward": first["first_forward"], "first_step": first["first_step"]}  # fmt: skip
    out = {label: stamps[b] - stamps[a] for label, a, b in STAGES}
    out[DYNAMO] = 0.0
    if first.get("dynamo_import"):  # a stretch of its own, taken out of whichever stretch it fell in
        begin, end = first["dynamo_import"]
        out[DYNAMO] = end - begin
        for label, a, b in STAGES:
            if stamps[a] <= begin < stamps[b]:
                out[label] -= end - begin
    out["total"] = stamps["first_step"] - t0
    others = [r for r in records if not r.get("first_step") and r.get("torch_import")]
    out[LAUNCH_TORCH] = sum(r["torch_import"][1] - r["torch_import"][0] for r in others)
    if compile:
        out[COMPILING] = float(json.loads((work / "output" / "summary.json").read_text())["compile"]["compile_s"])
    return out


def run(quick: bool = False) -> list[Figure]:
    why = trainctl_available()
    if why is not None:
        return [unavailable(NAME, "submit -> first completed step", why, unit="s")]
    reps = 1 if quick else 3
    runs: list[dict[str, Any]] = [run_once(WORK / "first-step") for _ in range(reps)]
    total = [r["total"] for r in runs]
    split = {label: statistics.median(r[label] for r in runs) for label in runs[0] if label != "total"}
    biggest = max([*(k for k, _, _ in STAGES), DYNAMO], key=lambda k: split[k])
    figs = [figure(NAME, "submit -> first completed step (digits, 2 processes)", total, unit="s",
                   note=f"biggest stretch: {biggest}", detail={"median_split_s": {k: round(v, 3) for k, v in split.items()}})]  # fmt: skip
    for label in [*(k for k, _, _ in STAGES), DYNAMO, LAUNCH_TORCH]:
        figs.append(figure(NAME, label, [r[label] for r in runs], unit="s"))
    if quick:  # the compiled run costs CI 20-30 s on 2 cores: a full run measures it
        why = "--quick skips the compile: true run (a full run measures it)"
        figs += [unavailable(NAME, COMPILED, why, unit="s"), unavailable(NAME, COMPILING, why, unit="s")]
        shutil.rmtree(WORK / "first-step", ignore_errors=True)
        return figs
    compiled = [run_once(WORK / "first-step", compile=True) for _ in range(reps)]
    figs.append(figure(NAME, COMPILED, [r["total"] for r in compiled], unit="s",
                       note="the same job with trainer.compile: true; inductor's cache as this machine has it",
                       detail={"first_step_s": [round(r["first step (forward, backward, all-reduce, optimizer)"], 3)
                                                for r in compiled]}))  # fmt: skip
    figs.append(figure(NAME, COMPILING, [r[COMPILING] for r in compiled], unit="s",
                       note="summary.json compile.compile_s: dynamo's compilation metrics, inside the first step"))  # fmt: skip
    shutil.rmtree(WORK / "first-step", ignore_errors=True)
    return figs

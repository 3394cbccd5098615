"""`python -m bench --gpu`: the trainer on one CUDA device, with a model that keeps it busy.

The model is trainer/examples/transformer.py at its default size (~98M parameters: 12 blocks of 768,
an 8,192-token vocabulary, 512 tokens a sample), bf16 autocast, AdamW, batch 32 a GPU, on its copy task.

- Step time: the trainer under its launcher (`trainer-launch`, NCCL, one process per GPU) against the
  textbook DDP loop (bench/textbook_gpu.py, under torchrun) on the same GPU, data, batch and optimizer,
  the runs interleaved. The probe's stamps (bench/probe/sitecustomize.py: the end of
  every optimizer step) are kept as a cross-check; neither loop waits for the GPU every step, so each is
  timed between two points that do: the textbook loop between two `torch.cuda.synchronize()`s, the
  trainer between its train lines at steps 30 and 150 (a line reads the window's loss). Checkpoints
  stay out of the timed window (`checkpoint_every` above the run); the final one is after it.
- Samples/s and model FLOPs utilisation: PaLM's FLOP count of the model (`train_flops_per_sample`) at the
  trainer's step time, over the bf16 peak measured in the same call (an 8192^3 bf16 matmul, CUDA events)
  and over the datasheet's dense bf16 figure for an H100 SXM (989 TFLOP/s).
- Data wait, peak memory: the trainer's own metrics.jsonl (`data_wait_s`, `peak_mem_mb`).
- `deterministic: true` against `false` (what `auto`, the default since issue 40, picks on CUDA): the same
  trainer run with each, for what the bit-identical resume costs.
- `compile: true` (with `BENCH_GPU_COMPILE=1`, as it adds two compiled runs a repetition): the textbook loop
  compiled as nanoGPT does (`torch.compile(model)`, then DDP) against the trainer with `compile: true`,
  `deterministic: false` and the data as token shards (trainer/data/tokens.py; the textbook keeps its records in
  memory as tensors): the step ratio, MFU, the data-wait share and the first step with its compile seconds.
- First step: from starting the launcher to the end of the first optimizer step (probe stamps), with
  the worker's phases before it (torch import, process group, DDP, first forward) in its detail.
- `--profile` (BENCH_GPU_PROFILE=1): the trainer's and the textbook's steady state traced by torch.profiler,
  the device's busy share, what made the host wait, and the loop's time by region (bench/gpu_profile.py).
- BENCH_GPU_VARIANTS=1 (or name parts, comma-separated): bench/gpu_variants.py, the step with one change at a time (fused AdamW, compile,
  DDP) in one process, with the kernels that take the device's time.
- BENCH_GPU_BASE=DIR (a `trainer_image` of an earlier commit, e.g. `git archive HEAD~1 trainer_image | tar
  -x -C DIR`): one more kind, `trainer-base`, that trainer with `deterministic: false`, interleaved with
  the rest: a change's effect measured in the same call, on the same device.
- Checkpoint (a child process, `python -m bench.gpu checkpoint REPS`): the trainer's save of the model's
  GPU tensors with AdamW state (trainer.checkpoint.files.save: torch.save, fsync, CRC check, atomic
  publish) against a plain `torch.save` of the same state + fsync, and the async save's blocking time;
  and, interleaved in the same run, what the disk itself writes: one file of the checkpoint's size from
  host memory, one `write()` + fsync (issue 40: checkpoint save / the disk's plain write, target >= 0.8).
  Without CUDA the child runs on the CPU (`python -m bench.gpu checkpoint 1 [LAYERS]`): a check that it runs.
"""

from __future__ import annotations

import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from . import gpu_figures
from .common import PROBE, ROOT, VENV_BIN, WORK, Figure, base_env
from .gpu_figures import BASE_ENV, BATCH, COMPILE_ENV
from .pty_run import run_in_pty
from .trainer_overhead import _probe_steps, steady_step_time

KINDS = ("textbook", "textbook-deterministic", "trainer", "trainer-nondeterministic")
COMPILE_KINDS = ("textbook-compile", "trainer-compile")
PROFILE_ENV = "BENCH_GPU_PROFILE"
VARIANTS_ENV = "BENCH_GPU_VARIANTS"  # bench/gpu_variants.py: the step, one change at a time, in one process


def matmul_peak_tflops(n: int = 8192, reps: int = 30) -> float:
    """The device's bf16 matmul rate: the median of `reps` n^3 products on random data, CUDA events."""
    import torch

    a, b = (torch.randn(n, n, device="cuda", dtype=torch.bfloat16) for _ in range(2))
    for _ in range(5):
        a @ b
    times = []
    for _ in range(reps):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        a @ b
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) / 1e3)
    del a, b
    torch.cuda.empty_cache()
    return 2 * n**3 / statistics.median(times) / 1e12


def data(steps: int) -> Path:
    from trainer.examples.transformer import DEFAULTS, write_copy_task

    out = WORK / "gpu-data" / f"copy-{steps}"
    if not (out / "train.jsonl").is_file():
        write_copy_task(out, steps * BATCH, DEFAULTS["seq"], DEFAULTS["vocab"], val=64)
    if not (out / "train.bin").is_file():  # the same samples as token shards (the same seed)
        write_copy_task(out, steps * BATCH, DEFAULTS["seq"], DEFAULTS["vocab"], val=64, tokens=True)
    return out / "train.jsonl"


def run_once(
    kind: str, train: Path, steps: int, warmup: int, tag: str, extra_env: dict[str, str] | None = None
) -> dict[str, Any]:
    """One run of `kind` (KINDS, COMPILE_KINDS, trainer-base): its step time, and the trainer's own figures."""
    run_dir = WORK / "gpu" / tag
    shutil.rmtree(run_dir, ignore_errors=True)
    probe_dir = run_dir / "probe"
    probe_dir.mkdir(parents=True)
    result = run_dir / "textbook.json"
    if kind.startswith("trainer"):
        argv = [sys.executable, "-m", "trainer.launch", "--nproc-per-node", "1", "--",
                sys.executable, "-m", "trainer.train", "--model", "trainer.examples.transformer:build",
                "--train-data", str(train), "--batch-size", str(BATCH), "--epochs", "1", "--max-steps", str(steps),
                "--lr", "0.0001", "--clip-grad", "0", "--lr-schedule", "constant", "--precision", "bf16",
                "--checkpoint-every", str(10 * steps), "--log-every", "10", "--resume", "never",
                "--output-dir", str(run_dir / "output"),
                "--deterministic", "true" if kind == "trainer" else "false"]  # fmt: skip
        if kind == "trainer-base":
            extra_env = {**(extra_env or {}), "PYTHONPATH": f"{os.environ[BASE_ENV]}{os.pathsep}{PROBE}"}
        if kind == "trainer-compile":
            argv[argv.index("--train-data") + 1] = str(train.with_suffix(".bin"))
            argv += ["--compile", "true"]
    else:
        argv = [str(VENV_BIN / "torchrun"), "--standalone", "--nproc-per-node", "1", str(ROOT / "bench" / "textbook_gpu.py"),
                str(train), str(BATCH), str(steps), str(warmup), str(result)]  # fmt: skip
        argv += (
            ["deterministic"] if kind == "textbook-deterministic" else ["compile"] if kind == "textbook-compile" else []
        )
    env = base_env(**{"PYTHONPATH": str(PROBE), "BENCH_PROBE_DIR": str(probe_dir), **(extra_env or {})})
    started = time.time()
    code, text = run_in_pty(argv, env, run_dir, timeout=300)
    if code != 0:
        raise RuntimeError(f"{kind} run exited {code}:\n{text[-3000:]}")
    if not kind.startswith("trainer"):
        got: dict[str, Any] = json.loads(result.read_text())
        shutil.rmtree(run_dir, ignore_errors=True)
        return got
    (stamps,) = _probe_steps(probe_dir)
    worker = next(r for f in probe_dir.glob("*.json") if (r := json.loads(f.read_text())).get("steps_perf"))
    records = [json.loads(line) for line in (run_dir / "output" / "metrics.jsonl").read_text().splitlines()]
    window = [r for r in records if r.get("kind") == "train" and r["step"] > warmup]
    lines = {r["step"]: r for r in records if r.get("kind") == "train"}
    got = {
        # between the train lines of steps `warmup` and `steps`: each is written after reading the window's
        # loss, which waits for the GPU, as the textbook loop's synchronize does
        "step_s": (lines[steps]["time"] - lines[warmup]["time"]) / (steps - warmup),
        "probe_step_s": steady_step_time(stamps, warmup),
        "own_step_s": statistics.fmean(r["step_time_s"] for r in window),
        "data_wait_s": statistics.fmean(r["data_wait_s"] for r in window),
        "peak_mem_mb": max(r["peak_mem_mb"] for r in window),
        "first_step_s": worker["first_step"] - started,
        "first_step_alone_s": worker["first_step"] - worker["first_forward"],
        "first_step_phases": first_step_phases(worker, started),
        "compile_s": (json.loads((run_dir / "output" / "summary.json").read_text()).get("compile") or {}).get(
            "compile_s"
        ),
    }
    shutil.rmtree(run_dir, ignore_errors=True)
    return got


def first_step_phases(worker: dict[str, Any], started: float) -> dict[str, float]:
    """Seconds from the launcher's start to the start and end of each of the worker's phases before its first
    step (the gaps between them are the trainer's own start-up: its imports, data, model)."""
    phases = ("torch_import", "dynamo_import", "pg_init", "ddp_init")
    ends: dict[str, float] = {
        f"{k}_{edge}": worker[k][i] for k in phases if k in worker for i, edge in enumerate(("begin", "end"))
    }
    ends |= {"worker_start": worker.get("start") or started, "first_forward": worker["first_forward"]}
    return {k: round(t - started, 3) for k, t in sorted(ends.items(), key=lambda kv: kv[1])}


def checkpoint_child(reps: int, layers: int | None = None) -> dict[str, Any]:
    """The ~100M model's trainer save from GPU tensors vs a plain torch.save, and the async save's blocking."""
    import torch
    import torch.distributed as dist
    import trainer.checkpoint.files as ckpt
    from trainer.examples.transformer import DEFAULTS, TokenClassifier

    from .checkpoint_save import async_saver, plain_write, timed_save

    work = WORK / "gpu-checkpoint"
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    cuda = torch.cuda.is_available()
    device = torch.device("cuda", 0) if cuda else torch.device("cpu")
    if cuda:
        torch.cuda.set_device(0)
    dist.init_process_group("nccl" if cuda else "gloo", init_method=f"file://{work / 'pg'}", rank=0, world_size=1,
                            device_id=device if cuda else None)  # fmt: skip
    torch.manual_seed(0)
    model = TokenClassifier(**{**DEFAULTS, "layers": layers or DEFAULTS["layers"]}).to(device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    with torch.autocast(device.type, dtype=torch.bfloat16):
        out = model(torch.randint(0, DEFAULTS["vocab"], (4, DEFAULTS["seq"]), device=device).float())
    out.float().logsumexp(-1).mean().backward()
    optimizer.step()
    info = ckpt.SaveInfo(step=1, epoch=0, position=1, samples=1, model="bench", model_args={}, world_size=1,
                         strategy="ddp")  # fmt: skip

    def save() -> tuple[float, int]:
        return timed_save(work, info, model, optimizer)

    def plain() -> float:
        path = work / "plain.pt"
        t0 = time.perf_counter()
        with open(path, "wb") as fh:
            torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict()}, fh)
            fh.flush()
            os.fsync(fh.fileno())
        elapsed = time.perf_counter() - t0
        path.unlink()
        return elapsed

    async_save, background = async_saver(work, info, model, optimizer)
    _, size = save()  # warm-up, and the bytes
    plain()
    payload = memoryview(torch.randint(0, 256, (size,), dtype=torch.uint8).numpy().tobytes())  # incompressible
    plain_write(work / "disk.bin", payload)  # warm-up: the disk's own write, one file of the checkpoint's size
    async_save()  # warm-up: allocates the pinned staging buffer the later saves reuse
    background.clear()
    saves, plains, disks, blocked = [], [], [], []
    for _ in range(reps):
        saves.append(save()[0])
        plains.append(plain())
        disks.append(plain_write(work / "disk.bin", payload))
        blocked.append(async_save())
    dist.destroy_process_group()
    shutil.rmtree(work, ignore_errors=True)
    params = sum(p.numel() for p in model.parameters())
    return {"params": params, "bytes": size, "save_s": saves, "plain_s": plains, "disk_s": disks,
            "async_blocked_s": blocked, "async_write_s": background, "device": str(device)}  # fmt: skip


def device_name() -> str:
    import torch

    return torch.cuda.get_device_name(0) if torch.cuda.is_available() else "no CUDA device"


def run(quick: bool = False) -> list[Figure]:
    import torch
    from trainer.examples.transformer import train_flops_per_sample

    if not torch.cuda.is_available():
        raise RuntimeError("python -m bench --gpu needs a CUDA device; torch sees none")
    reps, warmup, steps, ckpt_reps = (
        (1, 10, 30, 1) if quick else (int(os.environ.get("BENCH_GPU_REPS", "3")), 30, 150, 3)
    )
    peak = matmul_peak_tflops()
    train = data(steps)
    kinds = KINDS + (COMPILE_KINDS if os.environ.get(COMPILE_ENV) == "1" else ())
    kinds += ("trainer-base",) if os.environ.get(BASE_ENV) else ()
    got: dict[str, list[dict[str, Any]]] = {k: [] for k in kinds}
    for i in range(reps):  # interleaved: a drift hits every kind alike
        for kind in kinds:
            got[kind].append(run_once(kind, train, steps, warmup, f"{kind}-{i}"))
            print(f"   {kind} {i}: {got[kind][-1]['step_s'] * 1e3:.2f} ms/step", file=sys.stderr, flush=True)
    child = subprocess.run([sys.executable, "-m", "bench.gpu", "checkpoint", str(ckpt_reps)], cwd=ROOT,
                           env=base_env(), capture_output=True, text=True, timeout=400)  # fmt: skip
    if child.returncode != 0:
        raise RuntimeError(f"checkpoint child exited {child.returncode}: {child.stderr[-2000:]}")
    ck = json.loads(child.stdout.strip().splitlines()[-1])
    variants: list[Figure] = []
    if chosen := os.environ.get(VARIANTS_ENV):  # "1": every variant; else a comma-separated list of name parts
        from . import gpu_variants

        parts = [] if chosen == "1" else chosen.split(",")
        probe = subprocess.run([sys.executable, "-m", "bench.gpu_variants", "40", *parts], cwd=ROOT, env=base_env(),
                               capture_output=True, text=True, timeout=400)  # fmt: skip
        sys.stderr.write(probe.stderr[-3000:])
        if probe.returncode == 0:
            flops = train_flops_per_sample({}) * BATCH
            variants = gpu_variants.variant_figures(json.loads(probe.stdout.strip().splitlines()[-1]), peak, flops)
    profiled = None
    if os.environ.get(PROFILE_ENV) == "1":
        from . import gpu_profile

        def profiled_run(kind: str, env: dict[str, str]) -> None:
            run_once(kind, train, steps, warmup, f"profile-{kind}", env)

        out = Path(os.environ.get("BENCH_GPU_PROFILE_DIR", WORK / "gpu-profile"))
        try:  # the figures above stand without it
            loops = {"trainer": "trainer-nondeterministic", "textbook": "textbook"}
            loops |= {k: k for k in COMPILE_KINDS if k in kinds}  # what compile changes on the device
            profiled = gpu_profile.profile(profiled_run, loops, warmup, steps, out)
        except Exception as exc:
            profiled = {"error": f"{type(exc).__name__}: {exc}"}
            print(f"   profile failed: {profiled['error']}", file=sys.stderr, flush=True)
    return gpu_figures.figures(got, peak, ck, steps, warmup, device_name(), profiled) + variants


if __name__ == "__main__":
    assert sys.argv[1] == "checkpoint", sys.argv
    print(json.dumps(checkpoint_child(int(sys.argv[2]), int(sys.argv[3]) if len(sys.argv) > 3 else None)))

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
  `deterministic: false` and the data as token shards (trainer/tokens.py; the textbook keeps its records in
  memory as tensors): the step ratio, MFU, the data-wait share and the first step with its compile seconds.
- First step: from starting the launcher to the end of the first optimizer step (probe stamps).
- Checkpoint (a child process, `python -m bench.gpu checkpoint REPS`): the trainer's save of the model's
  GPU tensors with AdamW state (trainer.checkpoint_files.save: torch.save, fsync, CRC check, atomic
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

from .common import PROBE, ROOT, VENV_BIN, WORK, Figure, base_env, figure, unavailable
from .pty_run import run_in_pty
from .trainer_overhead import _probe_steps, steady_step_time

NAME = "gpu"
BATCH = 32
H100_SXM_BF16_DENSE_TFLOPS = 989.0  # NVIDIA H100 datasheet, SXM5, bf16 Tensor Core without sparsity
KINDS = ("textbook", "textbook-deterministic", "trainer", "trainer-nondeterministic")
COMPILE_KINDS = ("textbook-compile", "trainer-compile")
COMPILE_ENV = "BENCH_GPU_COMPILE"


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


def run_once(kind: str, train: Path, steps: int, warmup: int, tag: str) -> dict[str, Any]:
    """One run of `kind` (KINDS): its step time, and the trainer's own figures."""
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
        if kind == "trainer-compile":
            argv[argv.index("--train-data") + 1] = str(train.with_suffix(".bin"))
            argv += ["--compile", "true"]
    else:
        argv = [str(VENV_BIN / "torchrun"), "--standalone", "--nproc-per-node", "1", str(ROOT / "bench" / "textbook_gpu.py"),
                str(train), str(BATCH), str(steps), str(warmup), str(result)]  # fmt: skip
        argv += (
            ["deterministic"] if kind == "textbook-deterministic" else ["compile"] if kind == "textbook-compile" else []
        )
    env = base_env(PYTHONPATH=f"{PROBE}", BENCH_PROBE_DIR=str(probe_dir))
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
        "compile_s": (json.loads((run_dir / "output" / "summary.json").read_text()).get("compile") or {}).get(
            "compile_s"
        ),
    }
    shutil.rmtree(run_dir, ignore_errors=True)
    return got


def checkpoint_child(reps: int, layers: int | None = None) -> dict[str, Any]:
    """The ~100M model's trainer save from GPU tensors vs a plain torch.save, and the async save's blocking."""
    import torch
    import torch.distributed as dist
    import trainer.checkpoint_files as ckpt
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

    if not torch.cuda.is_available():
        raise RuntimeError("python -m bench --gpu needs a CUDA device; torch sees none")
    reps, warmup, steps, ckpt_reps = (
        (1, 10, 30, 1) if quick else (int(os.environ.get("BENCH_GPU_REPS", "3")), 30, 150, 3)
    )
    peak = matmul_peak_tflops()
    train = data(steps)
    kinds = KINDS + (COMPILE_KINDS if os.environ.get(COMPILE_ENV) == "1" else ())
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
    return figures(got, peak, ck, steps, warmup)


def figures(
    got: dict[str, list[dict[str, Any]]], peak: float, ck: dict[str, Any], steps: int, warmup: int
) -> list[Figure]:
    from trainer.examples.transformer import DEFAULTS, train_flops_per_sample

    trainer, textbook, fast = got["trainer"], got["textbook"], got["trainer-nondeterministic"]
    textbook_det = got["textbook-deterministic"]
    flops = train_flops_per_sample({}) * BATCH
    gb = ck["bytes"] / 1e9
    device = device_name()
    setup = (f"{device}; transformer {ck['params'] / 1e6:.0f}M parameters ({DEFAULTS}), bf16 autocast, AdamW, batch "
             f"{BATCH}, 1 process (NCCL); steps {warmup + 1}-{steps}, no checkpoint in the window")  # fmt: skip
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
        figure(NAME, "trainer step time", [r["step_s"] * 1e3 for r in trainer], unit="ms"),
        figure(NAME, "textbook step time", [r["step_s"] * 1e3 for r in textbook], unit="ms"),
        figure(NAME, "trainer samples/s", [BATCH / r["step_s"] for r in trainer], unit="samples/s",
               note=f"{DEFAULTS['seq']} tokens a sample",
               detail={"deterministic_false": [round(BATCH / r["step_s"], 1) for r in fast]}),
        figure(NAME, "model FLOPs utilisation vs measured bf16 peak", [flops / r["step_s"] / 1e12 / peak * 100 for r in trainer],
               unit="%", note=f"{flops / 1e12:.2f} TFLOP a step (PaLM's count); peak {peak:.0f} TFLOP/s measured "
               "(8192^3 bf16 matmul, median of 30); the trainer with deterministic: true",
               detail={"measured_peak_tflops": round(peak, 1),
                       "deterministic_false_percent": [round(flops / r["step_s"] / 1e12 / peak * 100, 1) for r in fast]}),
        figure(NAME, "model FLOPs utilisation vs datasheet bf16 dense (989 TFLOP/s, H100 SXM)",
               [flops / r["step_s"] / 1e12 / H100_SXM_BF16_DENSE_TFLOPS * 100 for r in trainer], unit="%",
               note=f"the datasheet figure is for the H100 SXM; this device is {device}"),
        figure(NAME, "data-wait share of step time (trainer's metrics)",
               [r["data_wait_s"] / r["step_s"] * 100 for r in trainer], unit="%", target="< 2"),
        figure(NAME, "trainer's own step_time_s / step time", [r["own_step_s"] / r["step_s"] for r in trainer],
               unit="x", note="1.0 means metrics.jsonl's step_time_s is honest on a GPU",
               detail={"probe_over_step_time": [round(r["probe_step_s"] / r["step_s"], 4) for r in trainer]}),
        figure(NAME, "peak GPU memory, trainer", [r["peak_mem_mb"] for r in trainer], unit="MiB",
               note="torch.cuda.max_memory_allocated", detail={"textbook_mib": [round(r["peak_mem_mb"]) for r in textbook]}),
        figure(NAME, "first-step latency: launcher start -> first optimizer step done", [r["first_step_s"] for r in trainer],
               unit="s", detail={"first_step_alone_s": [round(r["first_step_alone_s"], 3) for r in trainer]}),
        figure(NAME, "checkpoint save from GPU (trainer.checkpoint_files.save)", [gb / s for s in ck["save_s"]],
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


if __name__ == "__main__":
    assert sys.argv[1] == "checkpoint", sys.argv
    print(json.dumps(checkpoint_child(int(sys.argv[2]), int(sys.argv[3]) if len(sys.argv) > 3 else None)))

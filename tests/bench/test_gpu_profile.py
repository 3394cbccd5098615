"""`bench --gpu --profile`'s tracing and reading, run on the CPU: the probe traces a real trainer run's
steady state in its two windows, and bench/gpu_profile.py finds the loop's regions in the trace. (The
device half, kernels and the host's waits, needs CUDA: tests/bench/test_bench_smoke.py's GPU test.)"""

from __future__ import annotations

import gzip
import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from bench import gpu_profile  # noqa: E402
from bench.datasets import digits  # noqa: E402


def test_the_probe_traces_the_trainers_steady_state_and_the_regions_are_found(tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONPATH": f"{ROOT / 'bench' / 'probe'}{os.pathsep}{os.environ.get('PYTHONPATH', '')}",
           "BENCH_PROBE_DIR": str(tmp_path), "BENCH_PROFILE": "3-6,7-9", "BENCH_PROFILE_OUT": str(tmp_path)}  # fmt: skip
    argv = [sys.executable, "-m", "trainer.launch", "--nproc-per-node", "1", "--", sys.executable, "-m",
            "trainer.train", "--model", "digits", "--train-data", str(digits()), "--max-steps", "12",
            "--log-every", "2", "--resume", "never", "--output-dir", str(tmp_path / "out")]  # fmt: skip
    proc = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]

    got = gpu_profile.summarise(tmp_path, "trainer")

    assert got["kernels"]["steps"] == 3 and got["python"]["steps"] == 2  # optimizer steps 4-6 and 8-9
    assert "busy_share" not in got["kernels"]  # no device here, so no device figures
    assert got["kernels"]["waits_per_step"] == 0  # and nothing waited for one
    loop, step = got["python"]["loop"], got["python"]["step"]
    for region in ("trainer/training/loop.py: train_step", "trainer/training/metrics.py: on_step", "trainer/training/hang.py: on_step",
                   "trainer/training/signals.py: agreed", "trainer/checkpoint/checkpointer.py: save_if_due", "trainer/training/loop.py: log_train"):  # fmt: skip
        assert region in loop, (region, loop)
    assert loop["total_ms_per_step"] >= loop["trainer/training/loop.py: train_step"] > 0
    assert "trainer/training/steps.py: next_batch" in step and "torch/_tensor.py: backward" in step, step
    assert (
        "trainer/training/steps.py: _stamp" in got["python"]["trainer_functions"]
    )  # DDP on the CPU hooks its parameters
    assert not any(k.endswith(": run") or "train.py" in k for k in got["python"]["trainer_functions"])
    for window in ("kernels", "python"):  # the traces are kept, gzipped, for Perfetto
        (trace,) = tmp_path.glob(f"{window}-*.json.gz")
        assert json.loads(gzip.decompress(trace.read_bytes()))["traceEvents"]
        assert not list(tmp_path.glob(f"{window}-*.json"))


def test_the_device_busy_time_is_the_union_of_its_spans() -> None:
    assert gpu_profile.union_us([]) == 0
    assert gpu_profile.union_us([(0, 10), (5, 12), (20, 25), (21, 22)]) == 17
    assert gpu_profile.windows(30, 150) == "35-75,80-85"

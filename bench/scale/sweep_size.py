"""A 1,000-trial grid as one SLURM array, and `trainctl sweep status` over it.

`trainctl sweep JOB --grid trainer.lr=<1,000 values> --target slurm --parallel 64` renders one array script
(`#SBATCH --array=0-999%64`, targets/slurm/array.py) and submits it with one `sbatch` (a stand-in:
bench/scale/sbatch). `sweep status` then reads every trial's state with one `scontrol show job -o` (a
stand-in, bench/scale/scontrol: 64 tasks running, 936 pending in one record, as slurmctld shows a throttled
array) and `sacct` (a stand-in: no accounting). Both timed as fresh processes.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import subprocess
import time
from functools import partial
from pathlib import Path

from ..common import ROOT, VENV_BIN, WORK, Figure, base_env, figure, interleaved, wall
from .writers import JOB

NAME = "sweep"
TRIALS, PARALLEL = 1000, 64


def _stop_driver(folder: Path) -> None:
    """End the sweep's detached driver (it would poll the stand-ins after its folder is gone): `cancel`, then
    SIGTERM, as `trainctl sweep cancel` does, without cancelling every trial through the stand-ins."""
    (folder / "cancel").touch()
    with contextlib.suppress(OSError, ValueError, KeyError):
        os.kill(int(json.loads((folder / "driver.json").read_text())["pid"]), signal.SIGTERM)


def run_sweep(quick: bool = False) -> list[Figure]:
    trials = 100 if quick else TRIALS
    root = WORK / "sweep"
    shutil.rmtree(root, ignore_errors=True)
    (root / "bin").mkdir(parents=True)
    for tool in ("sbatch", "scontrol", "sacct"):
        shutil.copy(ROOT / "bench" / "scale" / tool, root / "bin" / tool)
    (root / "train.jsonl").write_text("{}\n")
    (root / "job.yaml").write_text(JOB.format(data=root / "train.jsonl", work=root / "work"))
    env = base_env(TRAINCTL_HOME=str(root / "home"))
    env["PATH"] = f"{root / 'bin'}{os.pathsep}{env['PATH']}"
    grid = ",".join(f"{1e-4 * (1 + i):.6g}" for i in range(trials))
    trainctl = str(VENV_BIN / "trainctl")
    t0 = time.perf_counter()
    done = subprocess.run([trainctl, "sweep", "job.yaml", "--grid", f"trainer.lr={grid}", "--target", "slurm",
                           "--parallel", str(PARALLEL)], cwd=root, env=env, capture_output=True, text=True)  # fmt: skip
    submit_s = time.perf_counter() - t0
    found = re.search(r"started (sweep:\S+): (\d+) trials", done.stdout)
    if done.returncode or not found or int(found.group(2)) != trials:
        raise RuntimeError(f"sweep did not start {trials} trials: {done.stdout[-500:]} {done.stderr[-1500:]}")
    scripts = list((root / "work").glob("*.sbatch"))
    if len(scripts) != 1 or f"#SBATCH --array=0-{trials - 1}%{PARALLEL}" not in scripts[0].read_text():
        raise RuntimeError(f"expected one array script of {trials} tasks, found {[p.name for p in scripts]}")
    listed = subprocess.run([trainctl, "list", "--limit", "1", "--output", "json"], env=env, capture_output=True,
                            text=True, check=True).stdout  # fmt: skip
    env.update(SCALE_ARRAY_ID=json.loads(listed)[0]["id"].split(":")[1].split("_")[0],
               SCALE_ARRAY_TASKS=str(trials), SCALE_ARRAY_RUNNING=str(PARALLEL))  # fmt: skip
    t = interleaved({"status": partial(wall, [trainctl, "sweep", "status", found.group(1)], env)},
                    1 if quick else 3, warmup=0 if quick else 1)  # fmt: skip
    _stop_driver(root / "home" / "sweeps" / found.group(1).split(":", 1)[1])
    shutil.rmtree(root, ignore_errors=True)
    load = round(os.getloadavg()[0], 2)
    return [
        figure(NAME, f"trainctl sweep of {trials:,} trials as one SLURM array (render + submit)", [submit_s], unit="s",
               note="one array script, one sbatch (stand-in)", detail={"load_avg": load}),
        figure(NAME, f"trainctl sweep status over {trials:,} trials", t["status"], unit="s", target="< 2",
               note=f"{PARALLEL} running, the rest pending; stand-in scontrol/sacct", detail={"load_avg": load}),
    ]  # fmt: skip

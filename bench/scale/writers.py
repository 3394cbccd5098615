"""The run store under concurrent writers: 8 `trainctl submit` processes at once, every record kept.

Each writer is the real CLI submitting a SLURM job (the record is written by `runner.submit` through
`RunStore.record`, as for any target); `sbatch` is a stand-in on PATH (bench/scale/sbatch, which cites
SLURM's source), so no cluster is needed. Every id a submit printed must be in `trainctl list` afterwards.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import time

from ..common import ROOT, VENV_BIN, WORK, Figure, base_env, figure

NAME = "scale"
JOB = """name: writer
trainer:
  model: digits
resources:
  nodes: 1
  procs_per_node: 1
data:
  train: {data}
slurm:
  workdir: {work}
"""


def concurrent_submits(writers: int, each: int) -> dict[str, float | int]:
    """`writers` processes each running `trainctl submit` `each` times, all at once; raises if a record is lost."""
    root = WORK / "writers"
    shutil.rmtree(root, ignore_errors=True)
    (root / "bin").mkdir(parents=True)
    shutil.copy(ROOT / "bench" / "scale" / "sbatch", root / "bin" / "sbatch")
    (root / "train.jsonl").write_text("{}\n")
    (root / "job.yaml").write_text(JOB.format(data=root / "train.jsonl", work=root / "work"))
    env = base_env(TRAINCTL_HOME=str(root / "home"))
    env["PATH"] = f"{root / 'bin'}{os.pathsep}{env['PATH']}"
    loop = f'for i in $(seq {each}); do "{VENV_BIN / "trainctl"}" submit job.yaml --target slurm || exit 1; done'
    t0 = time.perf_counter()
    procs = [subprocess.Popen(["sh", "-c", loop], cwd=root, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True) for _ in range(writers)]  # fmt: skip
    outs = [p.communicate(timeout=600) for p in procs]
    elapsed = time.perf_counter() - t0
    bad = [err[-500:] for p, (_, err) in zip(procs, outs, strict=True) if p.returncode]
    if bad:
        raise RuntimeError(f"a writer failed: {bad[0]}")
    submitted = {m for out, _ in outs for m in re.findall(r"^submitted (slurm:\d+)$", out, re.M)}
    listed = subprocess.run([str(VENV_BIN / "trainctl"), "list", "--limit", str(writers * each * 2), "--output",
                             "json"], env=env, capture_output=True, text=True, check=True).stdout  # fmt: skip
    kept = {r["id"] for r in json.loads(listed)}
    lost = submitted - kept
    if len(submitted) != writers * each or lost:
        raise RuntimeError(
            f"{writers * each} submits printed {len(submitted)} ids; lost from the store: {sorted(lost)}"
        )
    shutil.rmtree(root, ignore_errors=True)
    return {"seconds": elapsed, "records": len(kept), "lost": len(lost)}


def run_writers(quick: bool = False) -> list[Figure]:
    writers, each = (8, 1) if quick else (8, 10)
    got = concurrent_submits(writers, each)
    return [figure(NAME, f"run store: {writers} concurrent `trainctl submit` x {each}, records lost", [got["lost"]],
                   unit="records", target="<= 0", note="real CLI, stand-in sbatch (bench/scale/sbatch)",
                   detail={"records": got["records"], "wall_s": round(float(got["seconds"]), 2),
                           "load_avg": round(os.getloadavg()[0], 2)})]  # fmt: skip

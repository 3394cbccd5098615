#!/usr/bin/env bash
# Issue 40's short GPU probe, before the full figures (scripts/gpu-figures.sh): what the 98M step costs with
# one change at a time (bench/gpu_variants.py: fused AdamW, compile, DDP, CUDA graphs, and the top kernels),
# the checkpoint save against the disk's own write (python -m bench.gpu checkpoint), and where a worker's
# start-up goes before its first step (torch's import, the trainer's imports, the CUDA context, NCCL).
# Everything lands in OUT_DIR (default $OUT, the device tool's folder, else bench/.work/gpu-probe).
#
#   scripts/gpu-probe.sh [--wheels DIR]
set -uo pipefail
cd "$(dirname "$0")/.."
py=${PYTHON:-python3}
out=${OUT_DIR:-${OUT:-bench/.work/gpu-probe}}
mkdir -p "$out"
if [[ ${1:-} == --wheels ]]; then "$py" -m pip install -q --no-index --no-deps "$2"/*.whl; fi
"$py" -m pip install -q --no-index --no-deps --no-build-isolation -e ./trainer_image
nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.sm,clocks.max.sm --format=csv
export PYTHONUNBUFFERED=1
echo "== start-up"
TIMEFORMAT="import torch (a fresh process): %R s"
for _ in 1 2; do time "$py" -c "import torch"; done
"$py" -X importtime -c "import trainer.train" 2>"$out/importtime-train.txt"
sort -t'|' -k2 -n -r "$out/importtime-train.txt" | head -15
"$py" - <<'PY'
import os, time
t = time.perf_counter(); import torch; t1 = time.perf_counter()
torch.cuda.init(); torch.zeros(1, device="cuda"); torch.cuda.synchronize(); t2 = time.perf_counter()
import torch.distributed as dist
os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT="29531")
dist.init_process_group("nccl", rank=0, world_size=1, device_id=torch.device("cuda", 0)); t3 = time.perf_counter()
dist.all_reduce(torch.ones(1, device="cuda")); torch.cuda.synchronize(); t4 = time.perf_counter()
print(f"torch import {t1 - t:.2f} s, CUDA context {t2 - t1:.2f} s, NCCL group {t3 - t2:.2f} s, first all-reduce {t4 - t3:.2f} s")
dist.destroy_process_group()
PY
echo "== checkpoint"
timeout 150 "$py" -m bench.gpu checkpoint 3 >"$out/checkpoint.json" 2>"$out/checkpoint.log"; echo "rc=$?"
"$py" - "$out/checkpoint.json" <<'PY'
import json, statistics as s, sys
r = json.loads(open(sys.argv[1]).read().strip().splitlines()[-1]); gb = r["bytes"] / 1e9
for k in ("save_s", "plain_s", "disk_s", "async_write_s"):
    print(f"{k}: {[round(x, 3) for x in r[k]]} -> {gb / s.median(r[k]):.3f} GB/s")
print(f"save / disk: {s.median(r['disk_s']) / s.median(r['save_s']):.3f}; async blocked {[round(x * 1e3, 1) for x in r['async_blocked_s']]} ms")
PY
echo "== variants"
timeout 330 "$py" -m bench.gpu_variants 40 >"$out/variants.json" 2>"$out/variants.log"; echo "rc=$?"
grep -v "^\s*$" "$out/variants.log" | grep "^   " | cut -c1-1500

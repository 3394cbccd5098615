#!/usr/bin/env bash
# Issue 40's GPU figures in one device call, on a machine with CUDA and torch (no network needed):
# `python -m bench --gpu --profile` with the compiled kinds (BENCH_GPU_COMPILE=1), and with an earlier
# trainer as `trainer-base` when --base names one; the results, the profile's summary and its traces
# land in OUT_DIR (default $OUT, the device tool's folder, else bench/.work/gpu-out).
#
#   scripts/gpu-figures.sh [--wheels DIR] [--base DIR/trainer_image] [--reps N] [--limit SECONDS] [--no-profile]
#                          [--variants all|PART,PART]
#
# --base: `mkdir -p gpu-base && git archive HEAD trainer_image | tar -x -C gpu-base` before a change, then
# `--base gpu-base/trainer_image`: the change's effect, measured in the same call on the same device.
# --limit: stop the benchmark after this many seconds (it writes nothing when stopped: size the reps to fit).
# --no-profile: leave out the profiled runs (4 more runs). --variants: which of bench/gpu_variants.py's in-process
# variants to time (names holding a PART; default all).
set -euo pipefail
cd "$(dirname "$0")/.."
py=${PYTHON:-python3}
out=${OUT_DIR:-${OUT:-bench/.work/gpu-out}}
reps=1 limit=540 base="" profile=--profile variants=1
while [[ $# -gt 0 ]]; do
  case $1 in
    --wheels) "$py" -m pip install -q --no-index --no-deps "$2"/*.whl; shift 2 ;;
    --base) base=$(cd "$2" && pwd); shift 2 ;;
    --reps) reps=$2; shift 2 ;;
    --limit) limit=$2; shift 2 ;;
    --no-profile) profile=""; shift ;;
    --variants) variants=$2; [[ $variants == all ]] && variants=1; shift 2 ;;
    *) echo "unknown argument $1" >&2; exit 2 ;;
  esac
done
"$py" -m pip install -q --no-index --no-deps --no-build-isolation -e ./trainer_image
nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.sm,clocks.max.sm --format=csv || true
mkdir -p "$out"
export PYTHONUNBUFFERED=1 BENCH_GPU_COMPILE=1 BENCH_GPU_VARIANTS=$variants BENCH_GPU_REPS=$reps BENCH_GPU_PROFILE_DIR=$out/profile
[[ -n $base ]] && export BENCH_GPU_BASE=$base
status=0
timeout "$limit" "$py" -m bench --gpu $profile || status=$?
cp bench/results-gpu.json docs/benchmarks.md "$out/" 2>/dev/null || true
exit "$status"

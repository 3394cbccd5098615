#!/bin/sh
# trainctl local run of job 'gpu-bf16': 1 node x 2 process(es), nccl backend.
# `trainctl submit --target local` runs this in a detached process group with
# TRAINCTL_RUN_DIR set to the run's folder ($TRAINCTL_HOME/runs/<id>) and the log in log.txt there.
set -eu
: "${TRAINCTL_RUN_DIR:?set TRAINCTL_RUN_DIR to a folder for this run}"
mkdir -p "${TRAINCTL_RUN_DIR}/work"
cd "${TRAINCTL_RUN_DIR}/work"
export OMP_NUM_THREADS=1
export PYTHONUNBUFFERED=1
export TRAINCTL_GPUS_PER_NODE=2
export TRAINCTL_PROVENANCE='{"code_sha256":null,"image":"none (local python /PYTHON)","image_digest":null,"spec_sha256":"c215835a5625e30e6d42c79658ee450845038a98f3330482b14f8b6be792088c","trainctl_version":"0.1.0"}'
export TRAINER_CHECKPOINT_DIR="${TRAINCTL_RUN_DIR}/checkpoints"
export TRAINER_DATA_TRAIN=/REPO/tests/golden/local/data/train.jsonl
export TRAINER_DATA_VAL=/REPO/tests/golden/local/data/val.jsonl
export TRAINER_OUTPUT_DIR="${TRAINCTL_RUN_DIR}/output"
exec /PYTHON -m trainer.launch --platform local --nproc-per-node 2 --max-restarts 0 -- \
  /PYTHON -m trainer.train \
  --model digits \
  --global-batch-size 256 \
  --epochs 3 \
  --precision bf16 \
  --strategy fsdp \
  --train-data /REPO/tests/golden/local/data/train.jsonl \
  --val-data /REPO/tests/golden/local/data/val.jsonl \
  --checkpoint-dir "${TRAINCTL_RUN_DIR}/checkpoints" \
  --checkpoint-every 100 \
  --keep-checkpoints 3 \
  --output-dir "${TRAINCTL_RUN_DIR}/output"

#!/bin/sh
# trainctl local run of job 'digits': 1 node x 2 process(es), gloo backend.
# `trainctl submit --target local` runs this in a detached process group with
# TRAINCTL_RUN_DIR set to the run's folder ($TRAINCTL_HOME/runs/<id>) and the log in log.txt there.
set -eu
: "${TRAINCTL_RUN_DIR:?set TRAINCTL_RUN_DIR to a folder for this run}"
# max_runtime: 1800s (enforced by trainctl's runner)
mkdir -p "${TRAINCTL_RUN_DIR}/work"
cd "${TRAINCTL_RUN_DIR}/work"
export OMP_NUM_THREADS=1
export PYTHONUNBUFFERED=1
export TRAINCTL_PROVENANCE='{"code_sha256":null,"image":"none (local python /PYTHON)","image_digest":null,"spec_sha256":"6b1dfd91f5daf4daf455f122c3235b86394490b2d58cb9dd5254afe456205a67","trainctl_version":"0.1.0"}'
export TRAINER_CHECKPOINT_DIR="${TRAINCTL_RUN_DIR}/checkpoints"
export TRAINER_DATA_TRAIN=/JOB_DIR/data/digits/train.jsonl
export TRAINER_DATA_VAL=/JOB_DIR/data/digits/val.jsonl
export TRAINER_OUTPUT_DIR="${TRAINCTL_RUN_DIR}/output"
exec /PYTHON -m trainer.launch --platform local --nproc-per-node 2 --max-restarts 0 -- \
  /PYTHON -m trainer.train \
  --model digits \
  --epochs 8 \
  --lr 0.003 \
  --warmup-steps 10 \
  --train-data /JOB_DIR/data/digits/train.jsonl \
  --val-data /JOB_DIR/data/digits/val.jsonl \
  --checkpoint-dir "${TRAINCTL_RUN_DIR}/checkpoints" \
  --checkpoint-every 50 \
  --keep-checkpoints 2 \
  --output-dir "${TRAINCTL_RUN_DIR}/output"

#!/bin/sh
# trainctl local run of job 'elastic-mlp': 1 node x 2 process(es), gloo backend.
# `trainctl submit --target local` runs this in a detached process group with
# TRAINCTL_RUN_DIR set to the run's folder ($TRAINCTL_HOME/runs/<id>) and the log in log.txt there.
set -eu
: "${TRAINCTL_RUN_DIR:?set TRAINCTL_RUN_DIR to a folder for this run}"
mkdir -p "${TRAINCTL_RUN_DIR}/work"
cd "${TRAINCTL_RUN_DIR}/work"
export OMP_NUM_THREADS=4
export PYTHONUNBUFFERED=1
export TRAINCTL_PROVENANCE='{"code_sha256":null,"image":"none (local python /PYTHON)","image_digest":null,"spec_sha256":"1e23ad3e0ccf9d406c609786dccddc1e34ceb3bc452354beee73c6244677b654","trainctl_version":"0.1.0"}'
export TRAINER_CHECKPOINT_DIR="${TRAINCTL_RUN_DIR}/checkpoints"
export TRAINER_OUTPUT_DIR="${TRAINCTL_RUN_DIR}/output"
exec /PYTHON -m trainer.launch --platform local --nproc-per-node 2 --max-restarts 3 --nnodes 1:2 -- \
  /PYTHON -m trainer.train \
  --model mlp-regression \
  --model-args '{"depth":2,"hidden":64}' \
  --streaming true \
  --batch-size 16 \
  --max-steps 500 \
  --optimizer sgd \
  --lr 0.05 \
  --lr-schedule constant \
  --grad-accum 2 \
  --seed 7 \
  --hang-timeout 300 \
  --straggler-factor 1.5 \
  --stragglers exclude \
  --train-data /JOB_DIR/data/train \
  --val-data /abs/val.jsonl \
  --checkpoint-dir "${TRAINCTL_RUN_DIR}/checkpoints" \
  --checkpoint-every 20 \
  --keep-checkpoints 5 \
  --resume never \
  --output-dir "${TRAINCTL_RUN_DIR}/output"

#!/bin/sh
# shellcheck disable=SC2016  # a literal $ in single quotes is meant
# trainctl local run of job 'my-script': 1 node x 3 process(es), gloo backend.
# `trainctl submit --target local` runs this in a detached process group with
# TRAINCTL_RUN_DIR set to the run's folder ($TRAINCTL_HOME/runs/<id>) and the log in log.txt there.
set -eu
: "${TRAINCTL_RUN_DIR:?set TRAINCTL_RUN_DIR to a folder for this run}"
: "${TRAINCTL_SECRETS_DIR:?set TRAINCTL_SECRETS_DIR to the folder of secret files}"
# max_runtime: 7200s (enforced by trainctl's runner)
# retries: 2 (whole-job restarts by trainctl's runner)
# retry_on: preempted, hang, node_lost, slow_node, out_of_memory, application_error
cd /JOB_DIR/src
export GREETING='hello world'
export LOG_LEVEL=debug
export OMP_NUM_THREADS=2
export PYTHONUNBUFFERED=1
export TRAINCTL_PROVENANCE='{"code_sha256":null,"image":"none (local python python3.11)","image_digest":null,"spec_sha256":"43f6388e442e145779345727427c208606f4cb64b7e1d1e37a7a2f53a63ab49c","trainctl_version":"0.1.0"}'
export TRAINER_CHECKPOINT_DIR=/JOB_DIR/ckpt
export TRAINER_DATA_CORPUS=/JOB_DIR/corpus
export TRAINER_DATA_EVAL=/datasets/eval
export TRAINER_OUTPUT_DIR=/scratch/out
DB_PASSWORD="$(cat "${TRAINCTL_SECRETS_DIR}/db/prod/password")"; export DB_PASSWORD
WANDB_API_KEY="$(cat "${TRAINCTL_SECRETS_DIR}/wandb")"; export WANDB_API_KEY
exec python3.11 -m trainer.launch --platform local --nproc-per-node 3 --max-restarts 0 --hang-quiet-for 600 --hang-progress '^step \d+ .*loss' -- \
  python3.11 train.py --note 'it'"'"'s a "quoted" $HOME arg' --glob '*.jsonl'

#!/bin/bash
# Rendered by trainctl 0.1.0 from job llm-pyxis (spec sha256 10984ae3c6f5).
# Runtime: container=pyxis; 2 node(s) x 1 process(es); one launcher per node, which starts torchrun.
#SBATCH --job-name=llm-pyxis
#SBATCH --nodes=2
#SBATCH --ntasks-per-node=1
#SBATCH --gpus-per-node=1
#SBATCH --cpus-per-task=2
#SBATCH --mem=4096M
#SBATCH --time=1-02:00:00
#SBATCH --account=ml
#SBATCH --qos=normal
#SBATCH --constraint=localtest
#SBATCH --exclusive
#SBATCH --output=/shared/runs/llm/llm-pyxis-%j.out
#SBATCH --error=/shared/runs/llm/llm-pyxis-%j.out
#SBATCH --signal=USR1@300
#SBATCH --requeue
#SBATCH --open-mode=append
#SBATCH --comment=trainctl
set -euo pipefail

# The job's environment: values are quoted, so they are data and never run.
export NCCL_DEBUG=WARN
export OMP_NUM_THREADS=2
export TRAINCTL_PROVENANCE='{"code_sha256":null,"image":"ghcr.io/trainctl/trainer@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef","image_digest":"sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef","spec_sha256":"174b9e61a932bf1defc8d6bfe86ff75b6f520081feb80d62787678a9be0dc5ee","trainctl_version":"0.1.0"}'
export TRAINER_CHECKPOINT_DIR=/shared/ckpt/llm
export TRAINER_DATA_TRAIN=/shared/data/corpus
export TRAINER_OUTPUT_DIR=/shared/runs/llm/output
export WANDB_PROJECT='my project'
# Secrets are read on the cluster at run time; their values are never written here.
TRAINCTL_SECRETS_DIR=/etc/trainctl/secrets
if [ -r "$TRAINCTL_SECRETS_DIR"/hf/token ]; then
  HF_TOKEN=$(cat -- "$TRAINCTL_SECRETS_DIR"/hf/token)
  export HF_TOKEN
elif [ -z "${HF_TOKEN:-}" ]; then
  echo "trainctl: secret hf/token not found: no readable file $TRAINCTL_SECRETS_DIR/hf/token and HF_TOKEN is not set" >&2
  exit 1
fi
if [ -r "$TRAINCTL_SECRETS_DIR"/wandb-key ]; then
  WANDB_API_KEY=$(cat -- "$TRAINCTL_SECRETS_DIR"/wandb-key)
  export WANDB_API_KEY
elif [ -z "${WANDB_API_KEY:-}" ]; then
  echo "trainctl: secret wandb-key not found: no readable file $TRAINCTL_SECRETS_DIR/wandb-key and WANDB_API_KEY is not set" >&2
  exit 1
fi

# Rendezvous: the first node of the allocation; the port is derived from the job id.
MASTER_ADDR=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | sed -n 1p)
MASTER_PORT=$((20000 + SLURM_JOB_ID % 20000))
export MASTER_ADDR MASTER_PORT
mkdir -p -- /shared/runs/llm /shared/ckpt/llm /shared/runs/llm/output
echo "trainctl: job $SLURM_JOB_ID (restart ${SLURM_RESTART_COUNT:-0}) on $SLURM_JOB_NODELIST, master $MASTER_ADDR:$MASTER_PORT"

set +e
srun --nodes="$SLURM_JOB_NUM_NODES" --ntasks="$SLURM_JOB_NUM_NODES" --ntasks-per-node=1 --cpus-per-task=2 --kill-on-bad-exit=1 \
  --container-image=ghcr.io/trainctl/trainer@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef \
  --container-mounts=/shared/data:/shared/data:ro,/shared/runs/llm:/shared/runs/llm,/shared/ckpt/llm:/shared/ckpt/llm \
  trainer-launch --nproc-per-node 1 --max-restarts 0 -- \
  python -m trainer.train \
  --model mypkg.models:build \
  --model-args '{"hidden":1024,"layers":12}' \
  --streaming true \
  --batch-size 8 \
  --epochs 3 \
  --precision bf16 \
  --train-data /shared/data/corpus \
  --checkpoint-dir /shared/ckpt/llm \
  --checkpoint-every 200 \
  --keep-checkpoints 5 \
  --output-dir /shared/runs/llm/output
rc=$?
set -e
requeue() {
  for wait_s in 1 2 4 8 16; do
    if scontrol requeue "$SLURM_JOB_ID"; then return 0; fi
    sleep "$wait_s"
  done
  echo "trainctl: scontrol requeue $SLURM_JOB_ID kept failing; resubmit the job to resume from its checkpoint" >&2
}
if [ "$rc" -eq 143 ]; then
  echo "trainctl: preempted; the trainer wrote a checkpoint; requeueing job $SLURM_JOB_ID" >&2
  requeue
  exit "$rc"
fi
if [ "$rc" -ne 0 ] && [ "$rc" -ne 2 ] && [ "$rc" -ne 143 ]; then
  tries_file=/shared/runs/llm/.llm-pyxis-retries-"$SLURM_JOB_ID"
  tries=$(cat -- "$tries_file" 2>/dev/null || echo 0)
  if [ "$tries" -lt 1 ]; then
    echo $((tries + 1)) >"$tries_file"
    echo "trainctl: exit $rc; retry $((tries + 1)) of 1: requeueing job $SLURM_JOB_ID" >&2
    requeue
    exit "$rc"
  fi
fi
echo "trainctl: job $SLURM_JOB_ID finished with exit code $rc"
exit "$rc"

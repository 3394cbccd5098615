#!/bin/bash
# Rendered by trainctl 0.1.0 from job srun-pyxis (spec sha256 5f1ef8a58965).
# Runtime: container=pyxis; 2 node(s) x 1 process(es); srun starts one task per process (slurm.launch: srun), no torchrun.
#SBATCH --job-name=srun-pyxis
#SBATCH --nodes=2
#SBATCH --ntasks-per-node=1
#SBATCH --gpus-per-task=1
#SBATCH --cpus-per-task=2
#SBATCH --time=0-02:00:00
#SBATCH --output=/shared/runs/srun/srun-pyxis-%j.out
#SBATCH --error=/shared/runs/srun/srun-pyxis-%j.out
#SBATCH --signal=USR1@120
#SBATCH --requeue
#SBATCH --open-mode=append
set -euo pipefail

# This run's folder (checkpoints/, output/, work/): a requeue keeps the job id, so its folder too.
export TRAINCTL_RUN_DIR=/shared/runs/srun/runs/"$SLURM_JOB_ID"
# The job's environment: values are quoted, so they are data and never run.
export OMP_NUM_THREADS=2
export TRAINCTL_PROVENANCE='{"code_sha256":null,"image":"ghcr.io/trainctl/trainer:0.1.0","image_digest":null,"spec_sha256":"5f1ef8a58965a1bb649709f7ab820e10c0086f2b29a2de85194e75992d2da4c9","trainctl_version":"0.1.0"}'
export TRAINER_CHECKPOINT_DIR="${TRAINCTL_RUN_DIR}"/checkpoints
export TRAINER_DATA_TRAIN=/shared/data/digits/train.jsonl
export TRAINER_DATA_VAL=/shared/data/digits/val.jsonl
export TRAINER_OUTPUT_DIR="${TRAINCTL_RUN_DIR}"/output

# Rendezvous: the first node of the allocation; the port is derived from the job id.
MASTER_ADDR=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | sed -n 1p)
MASTER_PORT=$((20000 + SLURM_JOB_ID % 20000))
export MASTER_ADDR MASTER_PORT
mkdir -p -- /shared/runs/srun "${TRAINCTL_RUN_DIR}" "${TRAINCTL_RUN_DIR}"/checkpoints "${TRAINCTL_RUN_DIR}"/output "${TRAINCTL_RUN_DIR}"/work
echo "trainctl: job $SLURM_JOB_ID (restart ${SLURM_RESTART_COUNT:-0}) on $SLURM_JOB_NODELIST, master $MASTER_ADDR:$MASTER_PORT"

set +e
srun --nodes="$SLURM_JOB_NUM_NODES" --ntasks="$((SLURM_JOB_NUM_NODES * 1))" --ntasks-per-node=1 --cpus-per-task=2 --kill-on-bad-exit=1 --gpus-per-task=1 \
  --container-image=ghcr.io/trainctl/trainer:0.1.0 \
  --container-mounts=/shared/data:/shared/data:ro,/shared/runs/srun:/shared/runs/srun \
  trainer-launch --workdir "${TRAINCTL_RUN_DIR}"/work --launch srun --nproc-per-node 1 --max-restarts 0 -- \
  python -m trainer.train \
  --model digits \
  --epochs 3 \
  --precision bf16 \
  --train-data /shared/data/digits/train.jsonl \
  --val-data /shared/data/digits/val.jsonl \
  --checkpoint-every 100 \
  --keep-checkpoints 3
rc=$?
set -e
requeue() {
  for wait_s in 1 2 4 8 16; do
    if scontrol requeue "$SLURM_JOB_ID"; then return 0; fi
    sleep "$wait_s"
  done
  echo "trainctl: scontrol requeue $SLURM_JOB_ID kept failing; continue it with trainctl submit --resume-from slurm:$SLURM_JOB_ID" >&2
}
if [ "$rc" -eq 143 ]; then
  echo "trainctl: preempted; the trainer wrote a checkpoint; requeueing job $SLURM_JOB_ID" >&2
  requeue
  exit "$rc"
fi
echo "trainctl: job $SLURM_JOB_ID finished with exit code $rc"
exit "$rc"

#!/bin/bash
# Rendered by trainctl 0.1.0 from job digits (spec sha256 96042d8e4c77).
# Runtime: container=none; 2 node(s) x 2 process(es); one launcher per node, which starts torchrun.
#SBATCH --job-name=digits
#SBATCH --nodes=2
#SBATCH --ntasks-per-node=1
#SBATCH --cpus-per-task=2
#SBATCH --mem=2048M
#SBATCH --time=0-00:30:00
#SBATCH --partition=debug
#SBATCH --output=/shared/runs/digits/digits-%j.out
#SBATCH --error=/shared/runs/digits/digits-%j.out
set -euo pipefail

# This run's folder (checkpoints/, output/, work/): its job id and uid; a requeue keeps both, so the folder.
uid_file=/shared/runs/digits/runs/".uid-${SLURM_CLUSTER_NAME:-}-$SLURM_JOB_ID"  # submitted by hand (trainctl submit writes the uid here): made at the first start, kept for requeues
[ "${SLURM_RESTART_COUNT:-0}" != 0 ] && [ -s "$uid_file" ] ||
  { mkdir -p -- /shared/runs/digits/runs && od -An -N16 -tx1 /dev/urandom | tr -d " \n" > "$uid_file"; }
TRAINCTL_RUN_UID=$(cat -- "$uid_file"); export TRAINCTL_RUN_UID
export TRAINCTL_RUN_DIR=/shared/runs/digits/runs/"$SLURM_JOB_ID-$TRAINCTL_RUN_UID"
# The job's environment: values are quoted, so they are data and never run.
export OMP_NUM_THREADS=1
export TRAINCTL_PROVENANCE='{"code_sha256":null,"image":"none (slurm.container: none; the environment /opt/venvs/trainer on the nodes)","image_digest":null,"spec_sha256":"96042d8e4c77b7fce23429e51f216dccddac9084bf4d1f693054df1635c3d44e","trainctl_version":"0.1.0"}'
export TRAINER_CHECKPOINT_DIR="${TRAINCTL_RUN_DIR}"/checkpoints
export TRAINER_DATA_TRAIN=/shared/data/digits/train.jsonl
export TRAINER_DATA_VAL=/shared/data/digits/val.jsonl
export TRAINER_OUTPUT_DIR="${TRAINCTL_RUN_DIR}"/output
# The trainer's Python environment on the cluster.
export PATH=/opt/venvs/trainer/bin:"$PATH"

# Rendezvous: the first node of the allocation; the port is derived from the job id.
MASTER_ADDR=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | sed -n 1p) MASTER_PORT=$((20000 + SLURM_JOB_ID % 20000)); export MASTER_ADDR MASTER_PORT
mkdir -p -- /shared/runs/digits "${TRAINCTL_RUN_DIR}" "${TRAINCTL_RUN_DIR}"/checkpoints "${TRAINCTL_RUN_DIR}"/output "${TRAINCTL_RUN_DIR}"/work
echo "trainctl: job $SLURM_JOB_ID (restart ${SLURM_RESTART_COUNT:-0}) on $SLURM_JOB_NODELIST, master $MASTER_ADDR:$MASTER_PORT"
echo "trainctl: run $TRAINCTL_RUN_UID in $TRAINCTL_RUN_DIR"

rc=0  # srun's exit code: the highest of its tasks'
srun --nodes="$SLURM_JOB_NUM_NODES" --ntasks="$SLURM_JOB_NUM_NODES" --ntasks-per-node=1 --cpus-per-task=2 --kill-on-bad-exit=1 \
  trainer-launch --workdir "${TRAINCTL_RUN_DIR}"/work --nproc-per-node 2 --max-restarts 0 -- \
  python -m trainer.train --model digits --epochs 8 --lr 0.003 --hang-timeout 120 --stragglers exclude \
  --train-data /shared/data/digits/train.jsonl --val-data /shared/data/digits/val.jsonl \
  --checkpoint-every 50 --keep-checkpoints 3 || rc=$?
echo "trainctl: job $SLURM_JOB_ID finished with exit code $rc"
exit "$rc"

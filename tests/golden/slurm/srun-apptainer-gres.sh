#!/bin/bash
# Rendered by trainctl 0.1.0 from job srun-apptainer-gres (spec sha256 489ee112014e).
# Runtime: container=apptainer; 2 node(s) x 1 process(es); srun starts one task per process (slurm.launch: srun), no torchrun.
#SBATCH --job-name=srun-apptainer-gres
#SBATCH --nodes=2
#SBATCH --ntasks-per-node=1
#SBATCH --gres=gpu:1
#SBATCH --cpus-per-task=1
#SBATCH --output=/shared/runs/srun-gres/srun-apptainer-gres-%j.out
#SBATCH --error=/shared/runs/srun-gres/srun-apptainer-gres-%j.out
#SBATCH --requeue
#SBATCH --open-mode=append
set -euo pipefail

# This run's folder (checkpoints/, output/, work/): a requeue keeps the job id, so its folder too.
export TRAINCTL_RUN_DIR=/shared/runs/srun-gres/runs/"$SLURM_JOB_ID"
# The job's environment: values are quoted, so they are data and never run.
export OMP_NUM_THREADS=1
export TRAINCTL_PROVENANCE='{"code_sha256":null,"image":"ghcr.io/trainctl/trainer:0.1.0","image_digest":null,"spec_sha256":"489ee112014ee7c04a8b8944f7e2dfee37887785cd48b297938aa96a6ead3d50","trainctl_version":"0.1.0"}'
export TRAINER_CHECKPOINT_DIR="${TRAINCTL_RUN_DIR}"/checkpoints
export TRAINER_OUTPUT_DIR="${TRAINCTL_RUN_DIR}"/output

# Rendezvous: the first node of the allocation; the port is derived from the job id.
MASTER_ADDR=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | sed -n 1p)
MASTER_PORT=$((20000 + SLURM_JOB_ID % 20000))
export MASTER_ADDR MASTER_PORT
mkdir -p -- /shared/runs/srun-gres "${TRAINCTL_RUN_DIR}" "${TRAINCTL_RUN_DIR}"/checkpoints "${TRAINCTL_RUN_DIR}"/output "${TRAINCTL_RUN_DIR}"/work
echo "trainctl: job $SLURM_JOB_ID (restart ${SLURM_RESTART_COUNT:-0}) on $SLURM_JOB_NODELIST, master $MASTER_ADDR:$MASTER_PORT"

set +e
srun --nodes="$SLURM_JOB_NUM_NODES" --ntasks="$((SLURM_JOB_NUM_NODES * 1))" --ntasks-per-node=1 --cpus-per-task=1 --kill-on-bad-exit=1 --gpu-bind=per_task:1 \
  apptainer exec --nv --bind /shared/runs/srun-gres:/shared/runs/srun-gres docker://ghcr.io/trainctl/trainer:0.1.0 \
  trainer-launch --workdir "${TRAINCTL_RUN_DIR}"/work --launch srun --nproc-per-node 1 --max-restarts 0 -- \
  python train.py \
  --epochs 2
rc=$?
set -e
requeue() {
  for wait_s in 1 2 4 8 16; do
    if scontrol requeue "$SLURM_JOB_ID"; then return 0; fi
    sleep "$wait_s"
  done
  echo "trainctl: scontrol requeue $SLURM_JOB_ID kept failing; continue it with trainctl submit --resume-from slurm:$SLURM_JOB_ID" >&2
}
if [ "$rc" -ne 0 ] && [ "$rc" -ne 2 ] && [ "$rc" -ne 143 ]; then
  tries_file=/shared/runs/srun-gres/.srun-apptainer-gres-retries-"$SLURM_JOB_ID"
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

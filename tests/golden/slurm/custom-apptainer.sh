#!/bin/bash
# Rendered by trainctl 0.1.0 from job custom-apptainer (spec sha256 a8a75fa13598).
# Runtime: container=apptainer; 2 node(s) x 1 process(es); one launcher per node, which starts torchrun.
#SBATCH --job-name=custom-apptainer
#SBATCH --nodes=1-2
#SBATCH --ntasks-per-node=1
#SBATCH --gres=gpu:1
#SBATCH --cpus-per-task=1
#SBATCH --output=/shared/runs/custom/custom-apptainer-%j.out
#SBATCH --error=/shared/runs/custom/custom-apptainer-%j.out
#SBATCH --requeue
#SBATCH --open-mode=append
set -euo pipefail

# This run's folder (checkpoints/, output/, work/): a requeue keeps the job id, so its folder too.
export TRAINCTL_RUN_DIR=/shared/runs/custom/runs/"$SLURM_JOB_ID"
# The job's environment: values are quoted, so they are data and never run.
export OMP_NUM_THREADS=4
export TRAINCTL_PROVENANCE='{"code_sha256":null,"image":"ghcr.io/trainctl/trainer:0.1.0","image_digest":null,"spec_sha256":"a8a75fa13598ea26b527bfb02693cf51f20aa5bbd82788a128d47ccf1c7ec2e7","trainctl_version":"0.1.0"}'
export TRAINER_CHECKPOINT_DIR="${TRAINCTL_RUN_DIR}"/checkpoints
export TRAINER_DATA_TRAIN=/shared/data/train
export TRAINER_OUTPUT_DIR="${TRAINCTL_RUN_DIR}"/output
# Secrets are read on the cluster at run time; their values are never written here.
: "${API_TOKEN:?trainctl: secret api-token must arrive in API_TOKEN from the cluster environment (or set slurm.secrets_dir)}"
export API_TOKEN

# Rendezvous: the first node of the allocation; the port is derived from the job id.
MASTER_ADDR=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | sed -n 1p)
MASTER_PORT=$((20000 + SLURM_JOB_ID % 20000))
export MASTER_ADDR MASTER_PORT
mkdir -p -- /shared/runs/custom "${TRAINCTL_RUN_DIR}" "${TRAINCTL_RUN_DIR}"/checkpoints "${TRAINCTL_RUN_DIR}"/output "${TRAINCTL_RUN_DIR}"/work
echo "trainctl: job $SLURM_JOB_ID (restart ${SLURM_RESTART_COUNT:-0}) on $SLURM_JOB_NODELIST, master $MASTER_ADDR:$MASTER_PORT"

set +e
srun --nodes="$SLURM_JOB_NUM_NODES" --ntasks="$SLURM_JOB_NUM_NODES" --ntasks-per-node=1 --cpus-per-task=1 --kill-on-bad-exit=1 \
  apptainer exec --nv --bind /shared/runs/custom:/shared/runs/custom --bind /shared/data/train:/shared/data/train docker://ghcr.io/trainctl/trainer:0.1.0 \
  trainer-launch --workdir "${TRAINCTL_RUN_DIR}"/work --nproc-per-node 1 --max-restarts 3 --nnodes 1:2 --hang-quiet-for 900 --hang-start-within 1800 -- \
  python train.py \
  --config configs/base.yaml \
  --lr 3e-4
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
  tries_file=/shared/runs/custom/.custom-apptainer-retries-"$SLURM_JOB_ID"
  tries=$(cat -- "$tries_file" 2>/dev/null || echo 0)
  if [ "$tries" -lt 2 ]; then
    echo $((tries + 1)) >"$tries_file"
    echo "trainctl: exit $rc; retry $((tries + 1)) of 2: requeueing job $SLURM_JOB_ID" >&2
    requeue
    exit "$rc"
  fi
fi
echo "trainctl: job $SLURM_JOB_ID finished with exit code $rc"
exit "$rc"

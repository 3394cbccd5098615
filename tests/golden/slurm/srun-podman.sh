#!/bin/bash
# Rendered by trainctl 0.1.0 from job srun-podman (spec sha256 b929a47e57e3).
# Runtime: container=podman; 2 node(s) x 2 process(es); srun starts one task per process (slurm.launch: srun), no torchrun.
#SBATCH --job-name=srun-podman
#SBATCH --nodes=2
#SBATCH --ntasks-per-node=2
#SBATCH --cpus-per-task=1
#SBATCH --output=/shared/runs/srun-podman/srun-podman-%j.out
#SBATCH --error=/shared/runs/srun-podman/srun-podman-%j.out
set -euo pipefail

# This run's folder (checkpoints/, output/, work/): its job id and uid; a requeue keeps both, so the folder.
uid_file=/shared/runs/srun-podman/runs/".uid-${SLURM_CLUSTER_NAME:-}-$SLURM_JOB_ID"  # submitted by hand (trainctl submit writes the uid here): made at the first start, kept for requeues
[ "${SLURM_RESTART_COUNT:-0}" != 0 ] && [ -s "$uid_file" ] ||
  { mkdir -p -- /shared/runs/srun-podman/runs && od -An -N16 -tx1 /dev/urandom | tr -d " \n" > "$uid_file"; }
TRAINCTL_RUN_UID=$(cat -- "$uid_file"); export TRAINCTL_RUN_UID
export TRAINCTL_RUN_DIR=/shared/runs/srun-podman/runs/"$SLURM_JOB_ID-$TRAINCTL_RUN_UID"
# The job's environment: values are quoted, so they are data and never run.
export OMP_NUM_THREADS=1
export TRAINCTL_PROVENANCE='{"code_sha256":null,"image":"localhost/trainctl-trainer:0.1.0-cpu","image_digest":null,"spec_sha256":"b929a47e57e3e89d5265e860a54e1416529c80e1ede7eed420b4eb23aaaef780","trainctl_version":"0.1.0"}'
export TRAINER_CHECKPOINT_DIR="${TRAINCTL_RUN_DIR}"/checkpoints
export TRAINER_OUTPUT_DIR="${TRAINCTL_RUN_DIR}"/output

# Rendezvous: the first node of the allocation; the port is derived from the job id.
MASTER_ADDR=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | sed -n 1p) MASTER_PORT=$((20000 + SLURM_JOB_ID % 20000)); export MASTER_ADDR MASTER_PORT
mkdir -p -- /shared/runs/srun-podman "${TRAINCTL_RUN_DIR}" "${TRAINCTL_RUN_DIR}"/checkpoints "${TRAINCTL_RUN_DIR}"/output "${TRAINCTL_RUN_DIR}"/work
# podman: as root, the image's user 10001 runs the trainer and owns the run's folders; rootless, the caller's own id (--userns=keep-id).
if [ "$(id -u)" = 0 ]; then podman_user=(--user=10001:10001)
  chown 10001:10001 -- "${TRAINCTL_RUN_DIR}" "${TRAINCTL_RUN_DIR}"/checkpoints "${TRAINCTL_RUN_DIR}"/output "${TRAINCTL_RUN_DIR}"/work
else podman_user=(--userns=keep-id); fi
echo "trainctl: job $SLURM_JOB_ID (restart ${SLURM_RESTART_COUNT:-0}) on $SLURM_JOB_NODELIST, master $MASTER_ADDR:$MASTER_PORT"
echo "trainctl: run $TRAINCTL_RUN_UID in $TRAINCTL_RUN_DIR"
# shellcheck disable=SC2016 # Each node: the ID of the image its podman holds (`trainctl status` compares them); the quoted script runs there.
srun --nodes="$SLURM_JOB_NUM_NODES" --ntasks="$SLURM_JOB_NUM_NODES" --ntasks-per-node=1 bash -c 'node=${SLURMD_NODENAME:-$(hostname)}
image_id=$(podman image inspect --format "{{.Id}}" "$1") || { echo "trainctl: node $node: podman has no image $1 here: build it (scripts/image.sh build --flavor cpu) or podman pull it on every node" >&2; exit 1; }
echo "trainctl: node $node image $1 id $image_id"' trainctl-image localhost/trainctl-trainer:0.1.0-cpu

rc=0  # srun's exit code: the highest of its tasks'
srun --nodes="$SLURM_JOB_NUM_NODES" --ntasks="$((SLURM_JOB_NUM_NODES * 2))" --ntasks-per-node=2 --cpus-per-task=1 --kill-on-bad-exit=1 \
  podman run --rm --label=io.trainctl.slurm-job="$SLURM_JOB_ID" "${podman_user[@]}" \
  --read-only --network=host --pull=never --shm-size=1g --env='SLURM_*' --env=MASTER_ADDR \
  --env=MASTER_PORT --env=OMP_NUM_THREADS --env=TRAINCTL_PROVENANCE --env=TRAINCTL_RUN_DIR \
  --env=TRAINCTL_RUN_UID --env=TRAINER_CHECKPOINT_DIR --env=TRAINER_OUTPUT_DIR \
  --volume=/shared/runs/srun-podman:/shared/runs/srun-podman \
  localhost/trainctl-trainer:0.1.0-cpu \
  --workdir "${TRAINCTL_RUN_DIR}"/work --launch srun --nproc-per-node 2 --max-restarts 0 -- \
  python train.py || rc=$?
echo "trainctl: job $SLURM_JOB_ID finished with exit code $rc"
exit "$rc"

#!/bin/bash
# shellcheck disable=SC2016
# Rendered by trainctl 0.1.0 from job injection (spec sha256 85c32910733e).
# Runtime: container=none; 1 node(s) x 1 process(es); one launcher per node, which starts torchrun.
#SBATCH --job-name=injection
#SBATCH --nodes=1
#SBATCH --ntasks-per-node=1
#SBATCH --cpus-per-task=1
#SBATCH --output='/shared/runs/inj ection/injection-%j.out'
#SBATCH --error='/shared/runs/inj ection/injection-%j.out'
set -euo pipefail

# This run's folder (checkpoints/, output/, work/): its job id and uid; a requeue keeps both, so the folder.
uid_file='/shared/runs/inj ection/runs'/".uid-${SLURM_CLUSTER_NAME:-}-$SLURM_JOB_ID"  # submitted by hand (trainctl submit writes the uid here): made at the first start, kept for requeues
[ "${SLURM_RESTART_COUNT:-0}" != 0 ] && [ -s "$uid_file" ] ||
  { mkdir -p -- '/shared/runs/inj ection/runs' && od -An -N16 -tx1 /dev/urandom | tr -d " \n" > "$uid_file"; }
TRAINCTL_RUN_UID=$(cat -- "$uid_file"); export TRAINCTL_RUN_UID
export TRAINCTL_RUN_DIR='/shared/runs/inj ection/runs'/"$SLURM_JOB_ID-$TRAINCTL_RUN_UID"
# The job's environment: values are quoted, so they are data and never run.
export NEWLINE='a
touch /tmp/pwned
b'
export OMP_NUM_THREADS=1
export PAYLOAD='$(touch /tmp/pwned); `touch /tmp/pwned`'
export QUOTES='it'"'"'s "quoted"'
export TRAINCTL_PROVENANCE='{"code_sha256":null,"image":"none (slurm.container: none; the environment /opt/env with space/$(touch /tmp/pwned) on the nodes)","image_digest":null,"spec_sha256":"85c32910733e36abe9373054c16be3cc3651ebb8fbcb711c29c11df750ef9c09","trainctl_version":"0.1.0"}'
export TRAINER_CHECKPOINT_DIR="${TRAINCTL_RUN_DIR}"/checkpoints
export TRAINER_DATA_TRAIN='/shared/it'"'"'s here/$(touch /tmp/pwned)/`id`'
export TRAINER_OUTPUT_DIR="${TRAINCTL_RUN_DIR}"/output
# The trainer's Python environment on the cluster.
export PATH='/opt/env with space/$(touch /tmp/pwned)/bin':"$PATH"

# Rendezvous: the first node of the allocation; the port is derived from the job id.
MASTER_ADDR=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | sed -n 1p) MASTER_PORT=$((20000 + SLURM_JOB_ID % 20000)); export MASTER_ADDR MASTER_PORT
mkdir -p -- '/shared/runs/inj ection' "${TRAINCTL_RUN_DIR}" "${TRAINCTL_RUN_DIR}"/checkpoints "${TRAINCTL_RUN_DIR}"/output "${TRAINCTL_RUN_DIR}"/work
echo "trainctl: job $SLURM_JOB_ID (restart ${SLURM_RESTART_COUNT:-0}) on $SLURM_JOB_NODELIST, master $MASTER_ADDR:$MASTER_PORT"
echo "trainctl: run $TRAINCTL_RUN_UID in $TRAINCTL_RUN_DIR"

rc=0  # srun's exit code: the highest of its tasks'
srun --nodes="$SLURM_JOB_NUM_NODES" --ntasks="$SLURM_JOB_NUM_NODES" --ntasks-per-node=1 --cpus-per-task=1 --kill-on-bad-exit=1 \
  trainer-launch --workdir "${TRAINCTL_RUN_DIR}"/work --nproc-per-node 1 --max-restarts 0 -- \
  python -c 'import sys; print(sys.argv[1:])' '$(touch /tmp/pwned)' '`touch /tmp/pwned`' ''"'"'; touch /tmp/pwned; '"'"'' '"; touch /tmp/pwned; "' 'line1
touch /tmp/pwned
' \
  '--flag=$HOME ${IFS} !! \ *' || rc=$?
echo "trainctl: job $SLURM_JOB_ID finished with exit code $rc"
exit "$rc"

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

# This run's folder (checkpoints/, output/, work/): its job id and uid; a requeue keeps both, so the folder.
uid_file=/shared/runs/srun/runs/".uid-${SLURM_CLUSTER_NAME:-}-$SLURM_JOB_ID"  # submitted by hand (trainctl submit writes the uid here): made at the first start, kept for requeues
[ "${SLURM_RESTART_COUNT:-0}" != 0 ] && [ -s "$uid_file" ] ||
  { mkdir -p -- /shared/runs/srun/runs && od -An -N16 -tx1 /dev/urandom | tr -d " \n" > "$uid_file"; }
TRAINCTL_RUN_UID=$(cat -- "$uid_file"); export TRAINCTL_RUN_UID
export TRAINCTL_RUN_DIR=/shared/runs/srun/runs/"$SLURM_JOB_ID-$TRAINCTL_RUN_UID"
# The job's environment: values are quoted, so they are data and never run.
export OMP_NUM_THREADS=2
export TRAINCTL_PROVENANCE='{"code_sha256":null,"image":"ghcr.io/trainctl/trainer:0.1.0","image_digest":null,"spec_sha256":"5f1ef8a58965a1bb649709f7ab820e10c0086f2b29a2de85194e75992d2da4c9","trainctl_version":"0.1.0"}'
export TRAINER_CHECKPOINT_DIR="${TRAINCTL_RUN_DIR}"/checkpoints
export TRAINER_DATA_TRAIN=/shared/data/digits/train.jsonl
export TRAINER_DATA_VAL=/shared/data/digits/val.jsonl
export TRAINER_OUTPUT_DIR="${TRAINCTL_RUN_DIR}"/output

# Rendezvous: the first node of the allocation; the port is derived from the job id.
MASTER_ADDR=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | sed -n 1p) MASTER_PORT=$((20000 + SLURM_JOB_ID % 20000)); export MASTER_ADDR MASTER_PORT
mkdir -p -- /shared/runs/srun "${TRAINCTL_RUN_DIR}" "${TRAINCTL_RUN_DIR}"/checkpoints "${TRAINCTL_RUN_DIR}"/output "${TRAINCTL_RUN_DIR}"/work
echo "trainctl: job $SLURM_JOB_ID (restart ${SLURM_RESTART_COUNT:-0}) on $SLURM_JOB_NODELIST, master $MASTER_ADDR:$MASTER_PORT"
echo "trainctl: run $TRAINCTL_RUN_UID in $TRAINCTL_RUN_DIR"
# Attempts (retries: 0; retry_on: preempted, hang, node_lost, slow_node, out_of_memory, application_error; slurm.preemption): each adds a start and an end line to attempts.jsonl.
attempts="$TRAINCTL_RUN_DIR"/attempts.jsonl excluded="$TRAINCTL_RUN_DIR"/excluded_nodes  # a preemption requeues this job (same id, same folder: the trainer resumes)
log=/shared/runs/srun/srun-pyxis-"$SLURM_JOB_ID".out verdict="${TRAINCTL_RUN_DIR}"/output/verdict.txt unusable='down|drain|fail|not_responding|no_respond|power'  # verdict: the trainer's, key=value lines
why_not_retried() { case "$1" in  # CAUSE ATTEMPT: nothing when attempt ATTEMPT (from 1) is retried, else why not
  invalid) echo "never retried" ;;
  preempted|hang|node_lost|slow_node|out_of_memory|application_error) [ "$2" -le 0 ] || echo "no retries left (retries: 0)" ;; esac; }
exit_cause() { case "$1" in 2) echo invalid ;; 143) echo preempted ;; 200) echo hang ;; 201) echo slow_node ;; *) echo application_error ;; esac; }
classify() {  # RC: sets cause (none: it succeeded), blamed (nodes, comma-separated) and words
  local lines tasks first code kind oom='oom_kill event|out-of-memory handler|out of memory'; lines=$(tail -c +"$((offset + 1))" -- "$log") || true
  tasks=$(sed -nE 's/^srun: error: ([^ ]+): tasks? [][0-9,-]+: (.*[^ ]) *$/\1 \2/p' <<<"$lines")  # NODE WHAT
  first=$(sed -n '/ Exited with exit code 0$/!{p;q}' <<<"$tasks") code=${first#* } code=${code/#Exited with exit code /exit }  # srun names the first to fail first
  cause="" words="" blamed=$(sed -n 's/^srun: error: Node failure on \([^ ]*\).*/\1/p' <<<"$lines" | awk '!seen[$0]++' | paste -sd, -)
  if kind=$(sed -n 's/^kind=//p' "$verdict" 2>/dev/null) && [[ $kind =~ ^(hang|slow_node)$ ]]; then  # the trainer's verdict names the nodes
    cause=$kind blamed=$(sed -n 's/^nodes=//p' "$verdict") words="the trainer's verdict: $kind"
  elif [ -n "$blamed" ]; then cause=node_lost words="srun: node failure"
  elif grep -qiE "$oom" <<<"$lines"; then cause=out_of_memory words="slurmstepd: out of memory" blamed=$(grep -iE "^[^ ]+ .*($oom)" <<<"$tasks" | cut -d' ' -f1 | paste -sd, -)
  elif grep -q "^srun: unrecognized option '--container" <<<"$lines"; then cause=invalid words="srun: no pyxis on this cluster (--container-image)"
  elif [ "$1" = 0 ]; then :  # it succeeded
  elif [ -n "$first" ] && [ "$code" != "exit 143" ]; then cause=$(exit_cause "${code#exit }") words="srun: ${first%% *}: $code"
  elif [ "$1" = 143 ]; then cause=preempted words="every task ended 143: the trainer checkpointed on SLURM's signal"
  else cause=$(exit_cause "$1") words="srun exit $1"
  fi; }
exclude() { for node in ${1//,/ }; do grep -qsxF "$node" "$excluded" || echo "$node" >>"$excluded"; done; }
ended() {  # NUMBER EXIT_CODE CAUSE BLAMED WORDS [REQUEUED [NEXT]]: say and record the attempt's end; BLAMED stays out of later ones
  local cause=null; exclude "$4"; [ -z "$3" ] || { cause="\"$3\""; echo "trainctl: attempt $1 ended: $3${2:+ (exit $2)}${4:+, blamed: ${4//,/, }}; ${7:-$5}" >&2; }
  printf '{"event": "end", "number": %s, "run_uid": "%s", "ended_at": %s, "exit_code": %s, "cause": %s, "blamed_nodes": [%s], "reason": "%s"%s}\n' "$1" \
    "$TRAINCTL_RUN_UID" "$(date +%s)" "${2:-null}" "$cause" "$(sed -E 's/[^,]+/"&"/g; s/,/, /g' <<<"$4")" "${5//\"/}" "${6:+, \"requeued\": \"$6\"}" >>"$attempts"; }
counted() { grep '"event": "end"' "$attempts" | grep -vc '"requeued": "preemption"' || true; }  # retries used
touch -- "$attempts" "$excluded" && started=$(grep -c '"event": "start"' "$attempts") || true
if [ "$started" -gt "$(grep -c '"event": "end"' "$attempts")" ]; then  # SLURM ended the last attempt itself
  nodes=$(grep '"event": "start"' "$attempts" | tail -n 1 | sed 's/.*"nodes": "\([^"]*\)".*/\1/') why="SLURM requeued the job before its script could say why"
  lost=$(sinfo -h -N -n "$nodes" -o '%N %T' | grep -iE " .*($unusable)" | cut -d' ' -f1 | sort -u | paste -sd, -) || true  # a node of it down now
  if [ -n "$lost" ]; then ended "$started" "" node_lost "$lost" "$why"; else ended "$started" "" preempted "" "$why" preemption; fi  # preempted: no retry used
fi
[ "$(counted)" -le 0 ] || { echo "trainctl: $(counted) attempt(s) ended and retries is 0: not starting another" >&2; exit 1; }
step=$(find "${TRAINCTL_RUN_DIR}"/checkpoints -maxdepth 1 -name 'step-*' -printf '%f\n' 2>/dev/null | sed -n 's/^step-\([0-9]\{8\}\)$/\1/p' | sort | tail -n 1 | sed 's/^0*\(.\)/\1/') || true  # where it resumes
offset=$(stat -c %s -- "$log") || offset=0; rm -f -- "$verdict"  # this attempt's part of the log starts there; a verdict now is an earlier one's
printf '{"event": "start", "number": %s, "run_uid": "%s", "engine_id": "%s", "nodes": "%s", "started_at": %s, "resumed_from_step": %s, "log_offset": %s}\n' \
  "$((started + 1))" "$TRAINCTL_RUN_UID" "$SLURM_JOB_ID" "$SLURM_JOB_NODELIST" "$(date +%s)" "${step:-null}" "$offset" >>"$attempts"

rc=0  # srun's exit code: the highest of its tasks'
srun --nodes="$SLURM_JOB_NUM_NODES" --ntasks="$((SLURM_JOB_NUM_NODES * 1))" --ntasks-per-node=1 --cpus-per-task=2 --kill-on-bad-exit=1 --gpus-per-task=1 \
  '--container-image=ghcr.io#trainctl/trainer:0.1.0' \
  --container-mounts=/shared/data:/shared/data:ro,/shared/runs/srun:/shared/runs/srun \
  trainer-launch --workdir "${TRAINCTL_RUN_DIR}"/work --launch srun --nproc-per-node 1 --max-restarts 0 -- \
  python -m trainer.train --model digits --epochs 3 --precision bf16 \
  --train-data /shared/data/digits/train.jsonl --val-data /shared/data/digits/val.jsonl \
  --checkpoint-every 100 --keep-checkpoints 3 || rc=$?
classify "$rc"; number=$((started + 1)) tries=$(($(counted) + 1)) requeued="" next=""
if [ -z "$cause" ]; then :  # it succeeded
elif [ "$cause" = preempted ]; then requeued=preemption next="requeueing job $SLURM_JOB_ID"  # SLURM's signal: no retry used
elif next=$(why_not_retried "$cause" "$tries") && [ -n "$next" ]; then :  # the policy says why not
fi
ended "$number" "$rc" "$cause" "$blamed" "$words" "$requeued" "$next"
if [ -n "$requeued" ]; then trap '' TERM  # the requeue SIGTERMs this script (ignored); slurmctld refuses it while the step ends
  for wait_s in 1 2 4 8 16; do scontrol requeue "$SLURM_JOB_ID" && wait_s=0 && break; sleep "$wait_s"; done
  if [ "$wait_s" != 0 ]; then echo "trainctl: scontrol requeue $SLURM_JOB_ID kept failing; continue it with trainctl submit --resume-from slurm:$SLURM_JOB_ID" >&2
  fi; exit "$rc"  # a retry's ExcNodeList comes after the requeue: slurmctld takes it only from a pending job
fi
echo "trainctl: job $SLURM_JOB_ID finished with exit code $rc"
exit "$rc"

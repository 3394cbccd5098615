"""The batch script's lines around an attempt (pure): plain bash that records the attempt's start in the run's
`attempts.jsonl`, and after srun classifies its end and requeues the job with the blamed nodes left out, or
stops. The hosts need only SLURM's own commands and coreutils/grep/sed: no Python (a RHEL 8 host's python3 is
3.6; under pyxis the host's python is not the job's).

One retry policy: the shell's tables are rendered from trainctl/runs/causes.py, never copied by hand:
`why_not_retried` (the decision, evaluated here for every cause: within the budget and past it),
`TRAINER_EXITS` and `TRAINER_KINDS`. tests/sdk/test_retry_shell.py runs these lines in bash for every cause x
retry_on x attempts-left and srun's words, and compares them with the Python.

The trainer's verdict reaches the script as `verdict.txt` beside failure.json (trainer/records.py
`write_verdict`: `kind=hang`, `nodes=n2,n3`), plain `key=value` lines that sed reads.

SLURM's rules relied on (Debian's slurm 22.05 manual pages, sbatch(1), scontrol(1), sinfo(1)):
- sbatch --requeue: "When a job is requeued, the batch script is initiated from its beginning"; the job keeps
  its id (so this run's folder), and `SLURM_RESTART_COUNT` counts the requeues; --open-mode=append keeps the
  earlier attempts' lines in the log, so an attempt reads its own from the log size at its start.
- `SLURM_JOB_NUM_NODES` ("Total number of nodes in the job's resource allocation") and `SLURM_JOB_PARTITION`
  ("Name of the partition in which the job is running") are in the batch script's environment.
- `scontrol requeue` puts a running batch job back to pending. slurmctld accepts a new ExcNodeList only for a
  pending job (SchedMD/slurm src/slurmctld/job_mgr.c, `_update_job`: "exc_nodes" is refused with
  ESLURM_JOB_NOT_PENDING unless IS_JOB_PENDING). So the script requeues first (the job is PENDING|COMPLETING
  while this script still runs, so it cannot start again yet) and then sets ExcNodeList ("Set the job's list of
  excluded node"), ignoring the SIGTERM that the requeue sends the batch step meanwhile (`trap '' TERM`).
- `sinfo -h -N -o '%N %T'`: one line per node, "%T State of nodes, extended form" (down, drained, ...).
"""

from __future__ import annotations

import shlex

from ...runs.causes import TRAINER_EXITS, TRAINER_KINDS, Cause, why_not_retried
from .words import sh

ATTEMPTS = "attempts.jsonl"
VERDICT = "verdict.txt"
EXCLUDED = "excluded_nodes"
UNUSABLE = "down|drain|fail|not_responding|no_respond|power"
"""sinfo states of a node that cannot run the job now (matched case-insensitively in `%T`)."""


def log_word(output: str) -> str:
    """The job's log path as a shell word: sbatch's `%j` becomes the job id."""
    return '"$SLURM_JOB_ID"'.join(shlex.quote(part) for part in output.split("%j"))


def policy_lines(retry_on: list[str], retries: int) -> list[str]:
    """`why_not_retried CAUSE ATTEMPT` in bash, rendered by evaluating causes.why_not_retried for each cause at an
    attempt within the budget and one past it (it depends on the attempt only through `attempt > retries`)."""
    rows: dict[tuple[str, str], list[str]] = {}
    for cause in Cause:
        within, past = (why_not_retried(cause, retry_on, n, retries) for n in (retries, retries + 1))
        rows.setdefault((within, past), []).append(cause.value)
    lines = ['why_not_retried() { case "$1" in  # CAUSE ATTEMPT: nothing when attempt ATTEMPT (from 1) is retried, else why not']  # fmt: skip
    for (within, past), causes in rows.items():
        if within == past:
            action = f'echo "{within}"' if within else ":"
        elif not within:
            action = f'[ "$2" -le {retries} ] || echo "{past}"'
        else:
            action = f'if [ "$2" -le {retries} ]; then echo "{within}"; else echo "{past}"; fi'
        lines.append(f"  {'|'.join(causes)}) {action} ;;")
    return [*lines[:-1], lines[-1] + " esac; }"]


def exit_cause_line() -> str:
    """`exit_cause CODE`: the cause a trainer's exit code names (causes.TRAINER_EXITS), else application_error."""
    cases = " ".join(f"{code}) echo {cause.value} ;;" for code, cause in sorted(TRAINER_EXITS.items()))
    return f'exit_cause() {{ case "$1" in {cases} *) echo {Cause.APPLICATION_ERROR.value} ;; esac; }}'


HEAD = r"""
# Attempts (@SAID@): each adds a start and an end line to attempts.jsonl.
attempts="$TRAINCTL_RUN_DIR"/attempts.jsonl excluded="$TRAINCTL_RUN_DIR"/excluded_nodes  # @REQUEUES@
log=@LOG@ verdict=@VERDICT@ unusable='@UNUSABLE@'  # verdict: the trainer's, key=value lines
""".strip("\n")

FUNCTIONS = r"""
@POLICY@
@EXIT_CAUSE@
classify() {  # RC: sets cause (none: it succeeded), blamed (nodes, comma-separated) and words
  local lines tasks first code kind oom='oom_kill event|out-of-memory handler|out of memory'; lines=$(tail -c +"$((offset + 1))" -- "$log") || true
  tasks=$(sed -nE 's/^srun: error: ([^ ]+): tasks? [][0-9,-]+: (.*[^ ]) *$/\1 \2/p' <<<"$lines")  # NODE WHAT
  first=$(sed -n '/ Exited with exit code 0$/!{p;q}' <<<"$tasks") code=${first#* } code=${code/#Exited with exit code /exit }  # srun names the first to fail first
  cause="" words="" blamed=$(sed -n 's/^srun: error: Node failure on \([^ ]*\).*/\1/p' <<<"$lines" | awk '!seen[$0]++' | paste -sd, -)
  if kind=$(sed -n 's/^kind=//p' "$verdict" 2>/dev/null) && [[ $kind =~ ^(@KINDS@)$ ]]; then  # the trainer's verdict names the nodes
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
""".strip("\n")

START = r"""
touch -- "$attempts" "$excluded" && started=$(grep -c '"event": "start"' "$attempts") || true
if [ "$started" -gt "$(grep -c '"event": "end"' "$attempts")" ]; then  # SLURM ended the last attempt itself
  nodes=$(grep '"event": "start"' "$attempts" | tail -n 1 | sed 's/.*"nodes": "\([^"]*\)".*/\1/') why="SLURM requeued the job before its script could say why"
  lost=$(sinfo -h -N -n "$nodes" -o '%N %T' | grep -iE " .*($unusable)" | cut -d' ' -f1 | sort -u | paste -sd, -) || true  # a node of it down now
  if [ -n "$lost" ]; then ended "$started" "" node_lost "$lost" "$why"; else ended "$started" "" preempted "" "$why" preemption; fi  # preempted: no retry used
fi
[ "$(counted)" -le @RETRIES@ ] || { echo "trainctl: $(counted) attempt(s) ended and retries is @RETRIES@: not starting another" >&2; exit 1; }
step=$(find @CHECKPOINTS@ -maxdepth 1 -name 'step-*' -printf '%f\n' 2>/dev/null | sed -n 's/^step-\([0-9]\{8\}\)$/\1/p' | sort | tail -n 1 | sed 's/^0*\(.\)/\1/') || true  # where it resumes
offset=$(stat -c %s -- "$log") || offset=0; rm -f -- "$verdict"  # this attempt's part of the log starts there; a verdict now is an earlier one's
printf '{"event": "start", "number": %s, "run_uid": "%s", "engine_id": "%s", "nodes": "%s", "started_at": %s, "resumed_from_step": %s, "log_offset": %s}\n' \
  "$((started + 1))" "$TRAINCTL_RUN_UID" "$SLURM_JOB_ID" "$SLURM_JOB_NODELIST" "$(date +%s)" "${step:-null}" "$offset" >>"$attempts"
""".strip("\n")
"""Why an attempt ends: the trainer's verdict, else srun's words (a node failure, the OOM killer, the
first task to fail), else srun's exit code. With --kill-on-bad-exit srun SIGTERMs every other task once one fails;
the trainer checkpoints on that SIGTERM and exits 143, and srun exits with the highest code, so a 143 is a
preemption only when the first task srun reports ended 143 too (SLURM 22.05's words: tests/sdk/test_retry_shell.py)."""

NO_ROOM = r"""
no_room() {  # why the job no longer fits its partition without the excluded nodes (nothing: it fits, or no answer)
  local nodes usable; [ -s "$excluded" ] && nodes=$(sinfo -h -N -p "$SLURM_JOB_PARTITION" -o '%N %T' | sort -u) && [ -n "$nodes" ] || return 0
  usable=$(grep -viE " .*($unusable)" <<<"$nodes" | cut -d' ' -f1 | grep -cvxF -f "$excluded") || true
  [ "$usable" -ge "$SLURM_JOB_NUM_NODES" ] || echo "the job needs $SLURM_JOB_NUM_NODES node(s) and partition" \
    "$SLURM_JOB_PARTITION has $usable usable once the blamed node(s) $(paste -sd, "$excluded" | sed 's/,/, /g') are excluded"; }
""".strip("\n")
"""Only where a retry can follow (retries > 0): whether the job still fits once the blamed nodes are left out."""

AFTER = r"""
classify "$rc"; number=$((started + 1)) tries=$(($(counted) + 1)) requeued="" next=""@LEFT@
if [ -z "$cause" ]; then :  # it succeeded
@PREEMPTION@elif next=$(why_not_retried "$cause" "$tries") && [ -n "$next" ]; then :  # the policy says why not
@RETRY@fi
ended "$number" "$rc" "$cause" "$blamed" "$words" "$requeued" "$next"
if [ -n "$requeued" ]; then trap '' TERM  # the requeue SIGTERMs this script (ignored); slurmctld refuses it while the step ends
  for wait_s in 1 2 4 8 16; do scontrol requeue "$SLURM_JOB_ID" && wait_s=0 && break; sleep "$wait_s"; done
  if [ "$wait_s" != 0 ]; then echo "trainctl: scontrol requeue $SLURM_JOB_ID kept failing; continue it with trainctl submit --resume-from slurm:$SLURM_JOB_ID" >&2
@EXCLUDE@  fi; exit "$rc"  # a retry's ExcNodeList comes after the requeue: slurmctld takes it only from a pending job
fi
""".strip("\n")
"""After srun (`rc` set): classify, decide (causes.why_not_retried's table), record, then requeue or fall through."""

RETRY = r"""elif exclude "$blamed" && next=$(no_room) && [ -n "$next" ]; then next="not retried: $next" words+="; not retried: $next"
else requeued=retry left=$(paste -sd, "$excluded") next="retry $tries of @RETRIES@${left:+, excluding $left}: requeueing job $SLURM_JOB_ID"
"""

EXCLUDE = r"""  elif [ -n "$left" ]; then scontrol update JobId="$SLURM_JOB_ID" ExcNodeList="$left" || echo "trainctl: could not exclude $left from job $SLURM_JOB_ID" >&2
"""

PREEMPTED = """elif [ "$cause" = preempted ]; then requeued=preemption next="requeueing job $SLURM_JOB_ID"  # SLURM's signal: no retry used
"""


def setup_lines(output: str, checkpoint_dir: str, output_dir: str, retries: int, retry_on: list[str],
                preemption: bool) -> list[str]:  # fmt: skip
    """Before srun: the policy, the classifier, the record of an attempt SLURM itself ended, and this start."""
    said = f"retries: {retries}; retry_on: {', '.join(retry_on)}{'; slurm.preemption' if preemption else ''}"
    requeues = ("a retry requeues this job (same id, same folder: the trainer resumes) without every node blamed so far"
                if retries else "a preemption requeues this job (same id, same folder: the trainer resumes)")  # fmt: skip
    words = {"@SAID@": said, "@REQUEUES@": requeues, "@UNUSABLE@": UNUSABLE, "@LOG@": log_word(output),
             "@VERDICT@": f"{sh(output_dir)}/{VERDICT}", "@POLICY@": "\n".join(policy_lines(retry_on, retries)),
             "@EXIT_CAUSE@": exit_cause_line(), "@KINDS@": "|".join(TRAINER_KINDS), "@RETRIES@": str(retries),
             "@CHECKPOINTS@": sh(checkpoint_dir)}  # fmt: skip
    return _fill("\n".join((HEAD, FUNCTIONS, START)), words).split("\n")


def function_lines(retry_on: list[str], retries: int) -> list[str]:
    """The script's functions alone (why_not_retried, exit_cause, classify, ended...), for the table tests."""
    words = {"@POLICY@": "\n".join(policy_lines(retry_on, retries)), "@EXIT_CAUSE@": exit_cause_line(),
             "@KINDS@": "|".join(TRAINER_KINDS)}  # fmt: skip
    return _fill(FUNCTIONS, words).split("\n")


def end_lines(retries: int, preemption: bool) -> list[str]:
    """After srun (`rc` set): classify, record, then requeue (a retry leaving the blamed nodes out) or fall through.
    With retries: 0 no retry can follow, so neither the fit check nor the exclusion is rendered."""
    words = {
        "@PREEMPTION@": PREEMPTED if preemption else "",
        "@RETRY@": RETRY if retries else "",
        "@EXCLUDE@": EXCLUDE if retries else "",
        "@LEFT@": ' left=""' if retries else "",
        "@RETRIES@": str(retries),
    }
    return [*(NO_ROOM.split("\n") if retries else []), *_fill(AFTER, words).split("\n")]


def _fill(text: str, words: dict[str, str]) -> str:
    for key, value in words.items():
        text = text.replace(key, value)
    return text

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

# This run's folder (checkpoints/, output/, work/): its job id and uid; a requeue keeps both, so the folder.
# Submitted by hand (trainctl submit writes the run's uid here): one made at the first start, kept for requeues.
uid_file=/shared/runs/custom/runs/".uid-${SLURM_CLUSTER_NAME:-}-$SLURM_JOB_ID"
if [ "${SLURM_RESTART_COUNT:-0}" = 0 ] || [ ! -s "$uid_file" ]; then
  mkdir -p -- /shared/runs/custom/runs && od -An -N16 -tx1 /dev/urandom | tr -d " \n" > "$uid_file"
fi
TRAINCTL_RUN_UID=$(cat -- "$uid_file")
export TRAINCTL_RUN_UID
export TRAINCTL_RUN_DIR=/shared/runs/custom/runs/"$SLURM_JOB_ID-$TRAINCTL_RUN_UID"
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
echo "trainctl: run $TRAINCTL_RUN_UID in $TRAINCTL_RUN_DIR"
# Each attempt is recorded in attempts.jsonl in the run's folder; its end is classified (hang, slow
# node, node lost, preempted, out of memory, application error, invalid input) by this program.
cat >"$TRAINCTL_RUN_DIR"/.attempts.py <<'TRAINCTL_ATTEMPTS_PY'
from __future__ import annotations
"""Why an attempt ended, and whether `retry_on` retries it: the trainer's part of the verdict.

Every target classifies an attempt's end into one `Cause` from two sources: the trainer's own words
(its exit code, trainer/exit_codes.py, and the failure.json it wrote, trainer/records.py) and the
engine's words (a SLURM job state or srun's task lines, a pod's container status, a SageMaker
FailureReason). This module holds the first part and the rule that joins them; each target's
`causes.py` holds the second, one pure function each, table-tested in tests/sdk/test_causes.py.

Standard library only, on purpose: the SLURM batch script runs this very file with the node's
`python3` to decide a retry (targets/slurm/retry_script.py embeds it), so the rule that decides a
retry on the cluster and the one `trainctl status` shows are one copy.

The anchor for `retry_on` is SkyPilot's managed-job recovery (sky/jobs/controller.py hands its
StrategyExecutor `max_restarts_on_errors` and `recover_on_exit_codes`; docs/source/examples/managed-jobs.rst:
preemptions are always recovered, user-code errors only `max_restarts_on_errors` times, and the
listed exit codes always). Here the list names causes, not codes, and `retries` bounds them all.
"""


from enum import Enum
from typing import Any

# trainer/exit_codes.py: the trainer owns these numbers; tests/sdk/test_causes.py checks the copy.
EXIT_BAD_INPUT = 2
EXIT_PREEMPTED = 143
EXIT_KILLED = 137
EXIT_HANG = 200
EXIT_SLOW_NODE = 201


class Cause(str, Enum):
    """Why an attempt ended (DESIGN.md "A run over days")."""

    INVALID = "invalid"
    PREEMPTED = "preempted"
    HANG = "hang"
    NODE_LOST = "node_lost"
    SLOW_NODE = "slow_node"
    OUT_OF_MEMORY = "out_of_memory"
    APPLICATION_ERROR = "application_error"


DEFAULT_RETRY_ON: tuple[Cause, ...] = (
    Cause.PREEMPTED,
    Cause.HANG,
    Cause.NODE_LOST,
    Cause.SLOW_NODE,
    Cause.OUT_OF_MEMORY,
    Cause.APPLICATION_ERROR,
)
"""Every cause but invalid input: what `retries: N` did before causes had names. Use
`retry_on: [preempted, hang, node_lost, slow_node]` for SkyPilot's default (no retry of the program's
own errors)."""

NEVER_RETRIED = (Cause.INVALID,)


def failure_of_attempt(record: dict[str, Any] | None, started_at: float | None) -> dict[str, Any] | None:
    """The failure.json verdict if this attempt wrote it (the file stays in the output folder across
    attempts: one older than the attempt's start is an earlier attempt's)."""
    if not isinstance(record, dict):
        return None
    written = record.get("time")
    if started_at is not None and isinstance(written, (int, float)) and written < started_at - 1.0:
        return None
    return record


def blamed_nodes(record: dict[str, Any] | None) -> list[str]:
    """The nodes a failure record blames: its suspects' nodes, in order, each once."""
    if not isinstance(record, dict):
        return []
    nodes = [s.get("node") for s in record.get("suspects") or [] if isinstance(s, dict)]
    return list(dict.fromkeys(n for n in nodes if isinstance(n, str) and n))


def from_trainer(exit_code: int | None, record: dict[str, Any] | None) -> Cause | None:
    """The cause the trainer's own words give, or None where they say nothing specific (exit 1: the
    engine's words may know better, a lost node, the OOM killer)."""
    kind = record.get("kind") if isinstance(record, dict) else None
    if exit_code == EXIT_BAD_INPUT:
        return Cause.INVALID
    if kind == "hang" or exit_code == EXIT_HANG:
        return Cause.HANG
    if kind == "slow_node" or exit_code == EXIT_SLOW_NODE:
        return Cause.SLOW_NODE
    if exit_code == EXIT_PREEMPTED:
        return Cause.PREEMPTED
    return None


def retried(cause: Cause, retry_on: list[str] | tuple[Cause, ...], attempt: int, retries: int) -> bool:
    """Whether attempt number `attempt` (from 1), ended by `cause`, gets another: at most `retries + 1`
    attempts in all, never for invalid input, and only for the causes `retry_on` lists."""
    if cause in NEVER_RETRIED or attempt > retries:
        return False
    return cause.value in {Cause(c).value for c in retry_on}


def describe(cause: Cause, exit_code: int | None, nodes: list[str]) -> str:
    """One line for logs and status: `hang (exit 200), blamed: n2`."""
    code = f" (exit {exit_code})" if exit_code is not None else ""
    blamed = f", blamed: {', '.join(nodes)}" if nodes else ""
    return f"{cause.value}{code}{blamed}"

"""Why a SLURM attempt ended: srun's words in the job's log, the job's state, and the trainer's record.

Pure and standard library only: the batch script runs this file (with trainctl/causes.py and
retry_program.py) under the node's `python3` to decide a retry, and `trainctl status` reads the verdicts
it wrote. The words are srun's and slurmstepd's, as this project's SLURM 22.05 cluster prints them into
the job's output (tests/slurm/test_causes_cluster.py runs each case on it):

    srun: error: n2: task 1: Exited with exit code 1      (one line per node and exit status)
    srun: error: n2: tasks 0-1: Killed                     (a signal: Killed, Terminated, ...)
    srun: error: Node failure on n2                        (slurmd stopped answering)
    slurmstepd: error: Detected 1 oom_kill event in StepId=12.0. Some of your processes may have been killed ...

The srun 143 bug this fixes: with `--kill-on-bad-exit` srun SIGTERMs every other task once one fails;
the trainer then checkpoints on that SIGTERM and exits 143, and srun exits with the highest code, 143
over a 1 or a 2. The batch script used to read that as a preemption. A preemption signals every task,
so every task ends 143, or the first one srun reports does and srun ends the rest itself ("Terminated");
a first task that ended otherwise is the real cause.
"""


import re
from typing import Any, NamedTuple


_TASK = re.compile(r"^srun: error: (\S+): tasks? ([0-9,\-\[\]]+): (.+?)\s*$")
_EXITED = re.compile(r"Exited with exit code (\d+)")
_NODE_FAILURE = re.compile(r"^srun: error: Node failure on (\S+)")
_OOM = re.compile(r"(oom_kill event|out-of-memory handler|Out Of Memory)", re.IGNORECASE)


class TaskEnd(NamedTuple):
    """One node's task(s) as srun reported their end: the exit code, or the signal's name."""

    node: str
    code: int | None
    signal: str | None


def task_ends(lines: list[str]) -> list[TaskEnd]:
    """srun's per-task verdicts, in the order it printed them (the first failure comes first)."""
    ends = []
    for line in lines:
        match = _TASK.match(line.strip())
        if not match:
            continue
        node, what = match.group(1), match.group(3)
        exited = _EXITED.search(what)
        ends.append(TaskEnd(node, int(exited.group(1)), None) if exited else TaskEnd(node, None, what))
    return ends


def lost_nodes(lines: list[str]) -> list[str]:
    return list(dict.fromkeys(m.group(1) for m in (_NODE_FAILURE.match(ln.strip()) for ln in lines) if m))


def classify(
    rc: int, lines: list[str], record: dict[str, Any] | None, job_state: str = ""
) -> tuple[Cause | None, list[str], str]:
    """(cause, blamed nodes, the words it came from) of one attempt: `rc` is srun's exit code, `lines` the
    attempt's part of the job's log, `record` this attempt's failure.json, `job_state` SLURM's (when the
    script did not live to say: NODE_FAIL, OUT_OF_MEMORY). Cause None: it succeeded."""
    said = from_trainer(None, record)
    if said is not None:  # the trainer's verdict names the node; srun's 143s are its peers being stopped
        return said, blamed_nodes(record), f"failure.json: {record.get('kind') if record else ''}"
    lost = lost_nodes(lines)
    if lost or job_state.startswith("NODE_FAIL"):
        return Cause.NODE_LOST, lost, "srun: node failure" if lost else f"job state {job_state}"
    ends = task_ends(lines)
    oom = [ln for ln in lines if _OOM.search(ln)]
    if oom or job_state.startswith("OUT_OF_MEMORY"):
        nodes = [e.node for e in ends if e.signal and _OOM.search(e.signal)]
        return Cause.OUT_OF_MEMORY, nodes, (oom[0].strip() if oom else f"job state {job_state}")
    if rc == 0:
        return None, [], ""
    # srun reports the first task to fail first; the tasks it then ends itself (--kill-on-bad-exit) follow,
    # as "Terminated" or a 143 of their own: only the first one is the attempt's cause
    first = next((e for e in ends if e.code != 0), None)
    if first is not None and first.code != EXIT_PREEMPTED:
        words = f"srun: {first.node}: " + (f"exit {first.code}" if first.signal is None else first.signal)
        if first.code == EXIT_BAD_INPUT:
            return Cause.INVALID, [], words
        if first.code is not None and first.code != 1:
            cause = from_trainer(first.code, None)
            if cause is not None:
                return cause, [], words
        return Cause.APPLICATION_ERROR, [], words
    if rc == EXIT_PREEMPTED:
        return Cause.PREEMPTED, [], "every task ended 143: the trainer checkpointed on SLURM's signal"
    return from_trainer(rc, None) or Cause.APPLICATION_ERROR, [], f"srun exit {rc}"

"""The program the batch script runs with the node's `python3` around each attempt (render.py writes this
file, joined with trainctl/causes.py and causes.py, into the run's folder): it records the attempt in
`attempts.jsonl` there, classifies its end, and says whether to requeue and which nodes to leave out.

    start   before srun: a start line (job id, nodes, the newest checkpoint's step, where the log is);
            an earlier attempt with no end line was ended by SLURM itself (node failure, its own
            requeue): its end is written now, from the job's words. Exit 3: the attempts are used up;
            exit 4: the records are another run's (their `run_uid` is not `TRAINCTL_RUN_UID`).
    end RC  after srun: the end line, and on stdout `requeue NODES` (NODES: every node blamed so far,
            comma-separated, for ExcNodeList), `preempted` or `stop`; its reasons on stderr (the log).

Standard library only, and no import of trainctl: on the cluster it is one file.
"""


import argparse
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Any


ATTEMPTS = "attempts.jsonl"
_UNUSABLE = ("DOWN", "DRAIN", "FAIL", "NOT_RESPONDING", "NO_RESPOND", "POWER")


def _say(text: str) -> None:
    print(f"trainctl: {text}", file=sys.stderr, flush=True)


def _read(path: Path) -> list[dict[str, Any]]:
    try:
        lines = path.read_text().splitlines()
    except OSError:
        return []
    return [json.loads(ln) for ln in lines if ln.strip().startswith("{")]


def _append(path: Path, entry: dict[str, Any]) -> None:
    with open(path, "a") as fh:
        fh.write(json.dumps(entry, sort_keys=True) + "\n")


def _run(argv: list[str]) -> str:
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return ""
    return done.stdout if done.returncode == 0 else ""


def _hostnames(nodelist: str) -> list[str]:
    return _run(["scontrol", "show", "hostnames", nodelist]).split() if nodelist else []


def _newest_step(checkpoint_dir: str) -> int | None:
    try:
        steps = [int(p.name[5:]) for p in Path(checkpoint_dir).iterdir() if re.fullmatch(r"step-\d{8}", p.name)]
    except OSError:
        return None
    return max(steps) if steps else None


def _unusable(nodes: list[str]) -> list[str]:
    """Which of `nodes` SLURM says are down, drained or not answering now."""
    if not nodes:
        return []
    out = _run(["sinfo", "-h", "-N", "-o", "%N|%T", "-n", ",".join(nodes)])
    states = dict(ln.split("|", 1) for ln in out.splitlines() if "|" in ln)
    return [n for n in nodes if any(word in states.get(n, "").upper() for word in _UNUSABLE)]


def _log_lines(log: str, offset: int) -> list[str]:
    try:
        with open(log, "rb") as fh:
            fh.seek(offset)
            return fh.read().decode(errors="replace").splitlines()
    except OSError:
        return []


def _summary(entries: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], dict[int, dict[str, Any]]]:
    starts = [e for e in entries if e.get("event") == "start"]
    ends = {e["number"]: e for e in entries if e.get("event") == "end"}
    return starts, ends


def _counted(ends: dict[int, dict[str, Any]]) -> int:
    """Attempts that used a retry: every end but a preemption SLURM requeued under slurm.preemption."""
    return sum(1 for e in ends.values() if e.get("requeued") != "preemption")


def _foreign(entries: list[dict[str, Any]], uid: str) -> str:
    """'' when every record is this run's (by its uid, identity.py); else the other run's uid."""
    for entry in entries:
        if entry.get("run_uid", "") != uid:
            return str(entry.get("run_uid") or "(no uid)")
    return ""


def start(args: argparse.Namespace, path: Path) -> int:
    entries, uid = _read(path), os.environ.get("TRAINCTL_RUN_UID", "")
    other = _foreign(entries, uid)
    if other:  # a reused job id's folder, or a copied file: never continue another run's attempts
        _say(f"{path} holds the attempts of run {other}, not of this run {uid}: refusing to continue them "
             "(nothing is changed; continue that run explicitly with trainctl submit --resume-from)")  # fmt: skip
        return 4
    starts, ends = _summary(entries)
    for earlier in starts:
        if earlier["number"] not in ends:  # SLURM ended it (its script did not live to write an end)
            blamed = _unusable(_hostnames(earlier.get("nodes", "")))
            # a node of it down or not answering: lost; none: SLURM's own requeue (preemption, an admin)
            cause = Cause.NODE_LOST if blamed else Cause.PREEMPTED
            entry = {"event": "end", "number": earlier["number"], "ended_at": time.time(), "cause": cause.value,
                     "blamed_nodes": blamed, "reason": "SLURM requeued the job before its script could say why", "run_uid": uid,
                     **({} if blamed else {"requeued": "preemption"})}  # fmt: skip
            _append(path, entry)
            ends[earlier["number"]] = entry
            _say(f"attempt {earlier['number']} ended without a verdict: {describe(cause, None, blamed)}")
    if _counted(ends) > args.retries:
        _say(f"{len(ends)} attempt(s) ended and retries is {args.retries}: not starting another")
        return 3
    offset = os.path.getsize(args.log) if os.path.exists(args.log) else 0
    _append(path, {"event": "start", "number": len(starts) + 1, "engine_id": os.environ.get("SLURM_JOB_ID", ""), "run_uid": uid,
                   "started_at": time.time(), "nodes": os.environ.get("SLURM_JOB_NODELIST", ""),
                   "resumed_from_step": _newest_step(args.checkpoint_dir), "log_offset": offset})  # fmt: skip
    return 0


def _still_fits(blamed: list[str]) -> str:
    """'' when the job still fits on its partition's usable nodes without `blamed`, else why not."""
    job_id = os.environ.get("SLURM_JOB_ID", "")
    fields = dict(re.findall(r"(\w+)=(\S+)", _run(["scontrol", "show", "job", "-o", job_id])))
    partition, needed = fields.get("Partition", ""), int(fields.get("NumNodes", "1").split("-")[0] or 1)
    out = _run(["sinfo", "-h", "-N", "-o", "%N|%T", *(["-p", partition] if partition else [])])
    nodes = dict(ln.split("|", 1) for ln in out.splitlines() if "|" in ln)
    if not nodes:
        return ""  # sinfo did not answer: let SLURM decide
    usable = [n for n, s in nodes.items() if n not in blamed and not any(w in s.upper() for w in _UNUSABLE)]
    if len(usable) >= needed:
        return ""
    return (f"the job needs {needed} node(s) and partition {partition or '(default)'} has {len(usable)} usable "
            f"once the blamed node(s) {', '.join(blamed)} are excluded")  # fmt: skip


def end(args: argparse.Namespace, path: Path) -> int:
    starts, ends = _summary(_read(path))
    this = starts[-1] if starts else {"number": 1, "started_at": None, "log_offset": 0}
    failure = failure_of_attempt(_json(Path(args.output_dir) / "failure.json"), this.get("started_at"))
    if failure is not None and failure.get("time") in {e.get("failure_time") for e in ends.values()}:
        failure = None  # an earlier attempt's verdict (written within the second before this one started)
    cause, blamed, words = classify(args.rc, _log_lines(args.log, int(this.get("log_offset") or 0)), failure)
    entry: dict[str, Any] = {"event": "end", "number": this["number"], "ended_at": time.time(), "exit_code": args.rc,
                             "cause": cause.value if cause else None, "blamed_nodes": blamed, "reason": words,
                             "failure_time": failure.get("time") if failure else None,
                             "run_uid": os.environ.get("TRAINCTL_RUN_UID", "")}  # fmt: skip
    if cause is None:
        _append(path, entry)
        print("stop")
        return 0
    said = describe(cause, args.rc, blamed)
    if cause is Cause.PREEMPTED and args.preemption:
        _append(path, {**entry, "requeued": "preemption"})
        _say(f"attempt {this['number']} ended: {said}; requeueing job {os.environ.get('SLURM_JOB_ID', '')}")
        print("preempted")
        return 0
    tries = _counted(ends) + 1
    if not retried(cause, args.retry_on.split(","), tries, args.retries):
        _append(path, entry)
        why = (
            "never retried"
            if cause is Cause.INVALID
            else ("not in retry_on" if tries <= args.retries else f"no retries left (retries: {args.retries})")
        )
        _say(f"attempt {this['number']} ended: {said}; {why}")
        print("stop")
        return 0
    excluded = list(dict.fromkeys([n for e in [*ends.values(), entry] for n in e.get("blamed_nodes") or []]))
    no_fit = _still_fits(excluded) if excluded else ""
    if no_fit:
        _append(path, {**entry, "reason": f"{words}; not retried: {no_fit}"})
        _say(f"attempt {this['number']} ended: {said}; not retried: {no_fit}")
        print("stop")
        return 0
    _append(path, {**entry, "requeued": "retry", "excluded": excluded})
    left = f", excluding {','.join(excluded)}" if excluded else ""
    _say(f"attempt {this['number']} ended: {said}; retry {tries} of {args.retries}{left}: "
         f"requeueing job {os.environ.get('SLURM_JOB_ID', '')}")  # fmt: skip
    print(f"requeue {','.join(excluded)}".rstrip())
    return 0


def _json(path: Path) -> dict[str, Any] | None:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="attempts")
    parser.add_argument("event", choices=["start", "end"])
    parser.add_argument("rc", type=int, nargs="?", default=0)
    parser.add_argument("--log", required=True)
    parser.add_argument("--checkpoint-dir", required=True)
    parser.add_argument("--output-dir", required=True)
    parser.add_argument("--retries", type=int, default=0)
    parser.add_argument("--retry-on", default="")
    parser.add_argument("--preemption", action="store_true")
    args = parser.parse_args(argv)
    path = Path(os.environ["TRAINCTL_RUN_DIR"]) / ATTEMPTS
    return start(args, path) if args.event == "start" else end(args, path)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
TRAINCTL_ATTEMPTS_PY
attempts() {
  python3 "$TRAINCTL_RUN_DIR"/.attempts.py "$@" --log /shared/runs/custom/custom-apptainer-"$SLURM_JOB_ID".out --checkpoint-dir "${TRAINCTL_RUN_DIR}"/checkpoints --output-dir "${TRAINCTL_RUN_DIR}"/output --retries 2 --retry-on preempted,hang,node_lost,slow_node,out_of_memory,application_error
}
attempts start || exit 1

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
  return 1
}
verdict=$(attempts end "$rc") || verdict=stop
case "$verdict" in
  preempted|requeue*)
    trap '' TERM  # the requeue SIGTERMs this script; ExcNodeList is set right after it
    excluded=""
    case "$verdict" in requeue\ *) excluded="${verdict#requeue }" ;; esac
    if requeue && [ -n "$excluded" ]; then
      scontrol update JobId="$SLURM_JOB_ID" ExcNodeList="$excluded" ||
        echo "trainctl: could not exclude $excluded from job $SLURM_JOB_ID" >&2
    fi
    exit "$rc"
    ;;
esac
echo "trainctl: job $SLURM_JOB_ID finished with exit code $rc"
exit "$rc"

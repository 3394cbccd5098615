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

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from ...causes import Cause, describe, failure_of_attempt, retried
from .causes import classify

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

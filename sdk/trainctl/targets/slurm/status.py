"""A SLURM run's state: `scontrol show job -o` (else sacct, where accounting answers) mapped onto trainctl's.

`status` asks about one job, and reads a failed one's log tail and a podman job's node image IDs;
`status_many` asks once for every job of a cluster (`trainctl list --refresh`), as submitit's InfoWatcher
does (submitit/slurm/slurm.py `SlurmInfoWatcher._make_command`: one sacct call with every job id, "asking
for each and every one of them individually takes a huge amount of time"): one `scontrol show job -o`
for all, then one sacct call for the jobs slurmctld no longer holds.
"""

from __future__ import annotations

import json
import posixpath
import re
from collections.abc import Sequence
from typing import Any

from ...errors import EngineError
from ...runs import records as run_records
from ...runs.causes import EXIT_BAD_INPUT, EXIT_PREEMPTED
from ...runs.image_ids import image_ids
from ...runs.state import Attempt, RunRef, RunState, RunStatus
from .handle import SlurmHandle
from .podman import node_image_ids
from .retry_script import ATTEMPTS
from .shell import Shell, err

LOG_TAIL_LINES = 20

_STATES: dict[str, RunState] = {
    "PENDING": RunState.QUEUED,
    "CONFIGURING": RunState.QUEUED,
    "REQUEUED": RunState.QUEUED,
    "REQUEUE_HOLD": RunState.QUEUED,
    "REQUEUE_FED": RunState.QUEUED,
    "RESIZING": RunState.QUEUED,
    "RUNNING": RunState.RUNNING,
    "COMPLETING": RunState.RUNNING,
    "STAGE_OUT": RunState.RUNNING,
    "SIGNALING": RunState.RUNNING,
    "SUSPENDED": RunState.RUNNING,
    "STOPPED": RunState.RUNNING,
    "COMPLETED": RunState.SUCCEEDED,
    "FAILED": RunState.FAILED,
    "TIMEOUT": RunState.FAILED,
    "NODE_FAIL": RunState.FAILED,
    "OUT_OF_MEMORY": RunState.FAILED,
    "BOOT_FAIL": RunState.FAILED,
    "DEADLINE": RunState.FAILED,
    "SPECIAL_EXIT": RunState.FAILED,
    "PREEMPTED": RunState.FAILED,
    "CANCELLED": RunState.CANCELLED,
    "REVOKED": RunState.CANCELLED,
}
_WHY = {
    "TIMEOUT": "the job reached its time limit (max_runtime)",
    "NODE_FAIL": "a node of the allocation failed",
    "OUT_OF_MEMORY": "a process ran out of memory (raise resources.memory)",
    "BOOT_FAIL": "a node failed to boot",
    "DEADLINE": "the job reached its deadline",
    "PREEMPTED": "the job was preempted and not requeued (set slurm.preemption: true to requeue and resume)",
    "SUSPENDED": "the job is suspended",
    "REQUEUED": "the job was requeued and waits to start again",
}


def parse_fields(line: str) -> dict[str, str]:
    """`scontrol show job -o` text -> {key: value}; values may contain spaces (Reason, paths)."""
    keys = list(re.finditer(r"(?:^|\s)([A-Za-z][A-Za-z0-9_/:]*)=", line))
    out: dict[str, str] = {}
    for i, match in enumerate(keys):
        end = keys[i + 1].start() if i + 1 < len(keys) else len(line)
        out.setdefault(match.group(1), line[match.end() : end].strip())
    return out


def scontrol(shell: Shell, job_id: str | None = None) -> dict[str, dict[str, str]]:
    """{job id: fields} from `scontrol show job -o` (one job, or every job slurmctld holds)."""
    done = shell.run(["scontrol", "show", "job", "-o", *([job_id] if job_id else [])], timeout=30)
    if done.returncode != 0:
        if re.search(r"Invalid job id", err(done), re.IGNORECASE):
            return {}
        raise EngineError(f"scontrol show job {job_id or ''} failed: {err(done)}".replace("  ", " "))
    found = [parse_fields(ln) for ln in done.stdout.decode(errors="replace").splitlines() if ln.strip()]
    out = {fields.get("JobId", ""): fields for fields in found}
    for fields in found:  # an array task is also known as <array job id>_<task id> (array.py)
        for task in array_tasks(fields.get("ArrayTaskId", "")):
            out.setdefault(f"{fields.get('ArrayJobId')}_{task}", fields)
    return out


def array_tasks(spec: str) -> list[int]:
    """The task ids of scontrol's ArrayTaskId: `3`, or the pending ones of a record, `2-5%2` or `1,3-4`."""
    found: list[int] = []
    for part in spec.partition("%")[0].split(","):
        low, _, high = part.partition("-")
        if low.isdigit() and (not high or high.isdigit()):
            found.extend(range(int(low), int(high or low) + 1))
    return found


def sacct(shell: Shell, job_ids: Sequence[str]) -> dict[str, dict[str, str]]:
    """{job id: fields} from accounting, one call for all (empty where it does not answer: many small
    clusters run without slurmdbd)."""
    if not job_ids:
        return {}
    argv = ["sacct", "-n", "-P", "-X", "-o", "JobID,State,ExitCode,Reason,NodeList"]
    try:
        done = shell.run([*argv, *(a for j in job_ids for a in ("-j", j))], timeout=30)
    except EngineError:
        return {}
    if done.returncode != 0:
        return {}
    found = {}
    for line in done.stdout.decode(errors="replace").splitlines():
        parts = line.split("|")
        if len(parts) >= 5 and parts[0] in job_ids:
            found[parts[0]] = {
                "JobState": parts[1], "ExitCode": parts[2], "Reason": parts[3], "NodeList": parts[4], "Source": "sacct",
            }  # fmt: skip
    return found


def log_tail(run: RunRef, lines: int = LOG_TAIL_LINES, path: str | None = None) -> list[str]:
    path = path or run.paths.log
    if not path:
        return []
    done = Shell.of(run).run(["tail", "-n", str(lines), "--", path], timeout=30)
    return done.stdout.decode(errors="replace").splitlines() if done.returncode == 0 else []


def _node_image_ids(shell: Shell, log: str) -> dict[str, str]:
    """{node: image ID} from the lines each node printed before the launch (podman.node_image_step)."""
    done = shell.run(["grep", "-a", "-E", "^trainctl: (node|job) ", "--", log], timeout=30)
    return node_image_ids(done.stdout.decode(errors="replace").splitlines())


_EXECVE = re.compile(
    r"^slurmstepd(?:-(?P<node>\S+?))?: error: execve\(\): "
    r"(?:bad interpreter\((?P<interpreter>.*)\)|(?P<program>[^:]+)): (?P<why>.+)$"
)


_NO_PYXIS = re.compile(r"^srun: unrecognized option '--container-image")


def not_started(tail: Sequence[str]) -> str:
    """Why the tasks never started, where srun or slurmstepd said so, else ''.

    - slurmstepd's exec_task (SchedMD/slurm src/slurmd/slurmstepd/task.c) logs `execve(): PROGRAM: %m` (or
      `bad interpreter(...)` for a script whose `#!` names a missing program) and exits with the errno:
      ENOENT is 2, the trainer's own code for bad input, so without this a launcher missing from the nodes'
      PATH would read as a bad config.
    - `--container-image` is an option pyxis's SPANK plugin adds to srun (NVIDIA/pyxis args.c `spank_opts`);
      on a cluster without it srun stops on an unrecognized option, exit 255."""
    for line in tail:
        if _NO_PYXIS.match(line.strip()):
            return (
                "srun does not know --container-image: pyxis, the SLURM plugin that adds it, is not installed on "
                "this cluster; set slurm.container to apptainer, podman or none (with slurm.python_env), or ask "
                "the cluster's admins for pyxis"
            )
        if not (found := _EXECVE.match(line.strip())):
            continue
        where = f" on {found['node']}" if found["node"] else ""
        said = line.strip().split(": error: ", 1)[1]
        if found["interpreter"]:
            return (
                f"the launcher could not start{where} ({said}): its interpreter is not there; "
                "slurm.python_env must be a path every node sees"
            )
        program, missing = found["program"], found["why"] == "No such file or directory"
        if missing and posixpath.basename(program) == "trainer-launch":
            fix = (
                "the trainer is not installed in the environment on the nodes' PATH; set slurm.python_env to a "
                "virtualenv or conda prefix on the cluster with the trainer installed (pip install trainer_image/), "
                "or slurm.container to run the trainer image"
            )
        elif missing:
            fix = f"install {program} on every node, or put it on the job's PATH"
        else:
            fix = f"{program} must be a program the job's user may run on every node"
        return f"{program} could not start{where} ({said}): {fix}"
    return ""


def status(run: RunRef) -> RunStatus:
    shell = Shell.of(run)
    fields = scontrol(shell, run.native_id).get(run.native_id) or sacct(shell, [run.native_id]).get(run.native_id)
    found = _status(run, fields, look=True)
    if found.state is RunState.UNKNOWN:
        return found
    return found.model_copy(update={"attempts": attempts(run), **_records(run)})


def _records(run: RunRef) -> dict[str, Any]:
    """`slow_nodes` and `failure` from the run's output folder on the cluster (docs/contracts.md section 2)."""
    if not run.paths.output_dir:
        return {}
    shell, found = Shell.of(run), {}
    for name, parse in ((run_records.SLOW_NODES, run_records.slow_nodes), (run_records.FAILURE, run_records.failure)):
        done = shell.run(["cat", "--", posixpath.join(run.paths.output_dir, name)], timeout=30)
        try:
            data = json.loads(done.stdout) if done.returncode == 0 else None
        except ValueError:
            data = None
        value = parse(data)
        if value:
            found[name.removesuffix(".json")] = value
    return found


def attempts(run: RunRef) -> list[Attempt]:
    """The attempts the batch script recorded in the run's attempts.jsonl (retry_script.py)."""
    if not run.paths.run_dir:
        return []
    path = posixpath.join(run.paths.run_dir, ATTEMPTS)
    done = Shell.of(run).run(["cat", "--", path], timeout=30)
    return attempts_of(done.stdout.decode(errors="replace").splitlines()) if done.returncode == 0 else []


def attempts_of(lines: Sequence[str]) -> list[Attempt]:
    """One `Attempt` per start line, its end line's verdict joined in (a line this trainctl cannot read is
    left out)."""
    found: dict[int, dict[str, Any]] = {}
    for line in lines:
        try:
            entry = json.loads(line)
        except ValueError:
            continue
        if isinstance(entry, dict) and isinstance(entry.get("number"), int):
            found.setdefault(entry["number"], {}).update({k: v for k, v in entry.items() if v is not None})
    out = []
    for number, entry in sorted(found.items()):
        code = entry.get("exit_code")
        state = (
            None
            if "ended_at" not in entry
            else RunState.SUCCEEDED
            if code == 0 and not entry.get("cause")
            else RunState.FAILED
        )
        try:
            out.append(
                Attempt.model_validate(
                    {**entry, "number": number, "engine_id": entry.get("engine_id", ""), "state": state}
                )
            )
        except ValueError:
            continue
    return out


def status_many(runs: Sequence[RunRef]) -> dict[str, RunStatus]:
    """Every run's status from one `scontrol show job -o` per cluster (+ one sacct call for the jobs it no
    longer holds); no per-job reads (a failed job's log tail, node image IDs: `status` has those)."""
    clusters: dict[tuple[str, ...], list[RunRef]] = {}
    for run in runs:
        clusters.setdefault(SlurmHandle.of(run).prefix, []).append(run)
    statuses = {}
    for prefix, group in clusters.items():
        shell = Shell(prefix=prefix)
        known = scontrol(shell)
        known.update(sacct(shell, [r.native_id for r in group if r.native_id not in known]))
        statuses.update({run.id: _status(run, known.get(run.native_id), look=False) for run in group})
    return statuses


def _status(run: RunRef, fields: dict[str, str] | None, look: bool) -> RunStatus:
    """The status from the job's fields; with `look`, what needs another call too (log tail, image IDs)."""
    log = run.paths.log or (fields or {}).get("StdOut")
    if fields is None:
        return RunStatus(
            state=RunState.UNKNOWN,
            reason=f"SLURM no longer knows job {run.native_id}: finished jobs leave slurmctld after MinJobAge "
            "and accounting (sacct) is not available; see its log for the outcome",
            log=log,
        )
    native = fields.get("JobState", "").split()[0] if fields.get("JobState") else ""
    state = _STATES.get(native, RunState.UNKNOWN)
    if native == "PREEMPTED" and fields.get("Requeue") == "1":
        state = RunState.QUEUED
    code, _, signal = fields.get("ExitCode", "").partition(":")
    restarts = int(fields.get("Restarts", "0") or 0)
    details: dict[str, Any] = {"signal": int(signal)} if signal.isdigit() and int(signal) else {}
    images = None
    if look and SlurmHandle.of(run).container == "podman" and log and state is not RunState.QUEUED:
        images = image_ids(_node_image_ids(Shell.of(run), log), "node")
    reason = _WHY.get(native, "")
    slurm_reason = fields.get("Reason", "")
    if state == RunState.QUEUED and slurm_reason not in ("", "None"):
        reason = f"{reason + '; ' if reason else ''}waiting: {slurm_reason}"
    if restarts and state in (RunState.QUEUED, RunState.RUNNING):
        # Without this a node failure that SLURM answered with a requeue would show as plain
        # "queued"/"running": say that an attempt ended and that the trainer resumes.
        again = (
            f"requeued {restarts} time(s): an attempt ended (node failure, preemption or a retry); "
            "the trainer resumes from the newest checkpoint in this run's folder"
        )
        reason = f"{again}; {reason}" if reason else again
    tail: list[str] = []
    if state == RunState.FAILED:
        tail = log_tail(run, path=log) if look else []
        if start := not_started(tail):
            reason = start
        elif code == str(EXIT_PREEMPTED):
            reason = (
                "the trainer was preempted and wrote a checkpoint (exit 143); continue it with "
                f"`trainctl submit JOB --target slurm --resume-from {run.id}`"
            )
        elif code == str(EXIT_BAD_INPUT):
            reason = "the trainer stopped on bad input (exit 2): config, data or model"
        elif not reason:
            reason = f"exit code {fields.get('ExitCode', '')}"
        if tail:
            reason += "; last log lines:\n" + "\n".join(tail)
    return RunStatus(
        state=state, native_state=native, reason=reason, exit_code=int(code) if code.isdigit() else None,
        nodes=fields.get("NodeList") or None, restarts=restarts, log=log, log_tail=tail, images=images, details=details,
    )  # fmt: skip

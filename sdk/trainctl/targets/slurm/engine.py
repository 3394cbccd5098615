"""Talking to SLURM: sbatch, scontrol, sacct, scancel and the job's log file.

Every command goes through one `Shell`: here, or on `slurm.login` through an ssh prefix (the
remote shell gets one quoted command string), so the local and the remote cluster share one code path.
"""

from __future__ import annotations

import json
import os
import posixpath
import re
import shlex
import subprocess
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from ...errors import EngineError
from ...image_ids import image_details
from ...run_state import RunRef, RunState, RunStatus
from ...spec import JobSpec
from .podman import node_image_ids
from .render import EXIT_BAD_INPUT, EXIT_PREEMPTED, script
from .section import SlurmSection
from .words import concrete

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


@dataclass(frozen=True)
class Shell:
    """Runs commands here, or through `prefix` (ssh to the login host) as one quoted string."""

    prefix: tuple[str, ...] = ()
    env: dict[str, str] = field(default_factory=dict)

    @classmethod
    def for_section(cls, section: SlurmSection) -> Shell:
        if section.login is None:
            return cls()
        return cls(prefix=(*section.ssh_command, *section.ssh_options, section.login))

    @classmethod
    def from_meta(cls, meta: dict[str, Any]) -> Shell:
        return cls(prefix=tuple(meta.get("prefix", ())))

    @property
    def remote(self) -> bool:
        return bool(self.prefix)

    def argv(self, args: Sequence[str]) -> list[str]:
        return [*self.prefix, shlex.join(args)] if self.prefix else list(args)

    def run(
        self, args: Sequence[str], stdin: bytes | None = None, timeout: float = 60.0
    ) -> subprocess.CompletedProcess[bytes]:
        argv = self.argv(args)
        try:
            return subprocess.run(argv, input=stdin, capture_output=True, timeout=timeout, check=False)
        except FileNotFoundError:
            where = f"(through {self.prefix[0]})" if self.prefix else "on this machine"
            raise EngineError(
                f"{argv[0]}: command not found {where}",
                hint="run trainctl on a SLURM login node, or set slurm.login to a login host reachable by ssh",
            ) from None
        except subprocess.TimeoutExpired:
            raise EngineError(f"{shlex.join(args)} did not answer within {timeout:g}s") from None

    def text(self, args: Sequence[str], stdin: bytes | None = None, timeout: float = 60.0) -> str:
        """stdout of a command that must succeed."""
        done = self.run(args, stdin=stdin, timeout=timeout)
        if done.returncode != 0:
            raise EngineError(f"{shlex.join(args)} failed (exit {done.returncode}): {_err(done)}")
        return done.stdout.decode(errors="replace")


def _err(done: subprocess.CompletedProcess[bytes]) -> str:
    return (done.stderr or done.stdout).decode(errors="replace").strip() or "no message"


def _section(job: JobSpec) -> SlurmSection:
    section = job.section("slurm")
    assert isinstance(section, SlurmSection)
    return section


def _cluster_summary(shell: Shell) -> str:
    """What the cluster offers, per partition, for an error message; '' if sinfo does not answer."""
    try:
        done = shell.run(["sinfo", "-h", "-o", "%P %D %c %m %G"], timeout=15)
    except EngineError:
        return ""
    if done.returncode != 0:
        return ""
    rows = []
    for line in done.stdout.decode(errors="replace").splitlines():
        parts = line.split()
        if len(parts) >= 5:
            gres = "" if parts[4] == "(null)" else f", gres {parts[4]}"
            rows.append(f"partition {parts[0]}: {parts[1]} node(s) with {parts[2]} CPUs and {parts[3]} MB{gres}")
    return "; ".join(rows)


def _refused(job: JobSpec, shell: Shell, message: str) -> EngineError:
    res = job.resources
    asked = f"{res.nodes} node(s) x {res.nprocs * res.cpus_per_proc} CPUs"
    if res.gpus_per_node:
        asked += f" x {res.gpus_per_node} GPUs"
    if res.memory:
        asked += f", {res.memory} memory per node"
    offers = _cluster_summary(shell)
    hint = f"the job asks for {asked}" + (f"; the cluster has {offers}" if offers else "")
    if re.search(r"node configuration is not available|Node count specification invalid|More processors", message):
        hint += "; lower resources.nodes / procs_per_node / cpus_per_proc / memory, or pick another slurm.partition"
    return EngineError(f"sbatch refused job {job.name}: {message}", hint=hint)


def _copy_code(job: JobSpec, shell: Shell, path: str) -> None:
    """The code bundle into the shared workdir (through ssh with slurm.login), written then renamed."""
    from ...bundle import bundle_for

    code = bundle_for(job)
    assert code is not None
    copy = 'cat > "$1.part" && mv -f -- "$1.part" "$1"'
    shell.text(["sh", "-c", copy, "sh", path], stdin=code.data, timeout=600)


def submit(
    job: JobSpec, wait: bool = False, timeout: float | None = None, poll: float = 2.0, hold: bool = False
) -> RunRef:
    """Write the script into the workdir, `sbatch --parsable` it; with wait, block until it ends. With hold
    (`--resume-from`, place.py) the job waits for `scontrol release` while its folder is filled."""
    section = _section(job)
    shell = Shell.for_section(section)
    text, p = script(job)
    local_abs = (lambda path: path) if shell.remote else os.path.abspath
    shell.text(["mkdir", "-p", "--", p.workdir])
    if p.code_bundle is not None:
        _copy_code(job, shell, p.code_bundle)
    shell.text(["tee", "--", p.script_path], stdin=text.encode())
    # A job the cluster can never run would otherwise wait in the queue forever (PartitionNodeLimit...).
    # sbatch reads the script from stdin, not from script_path: concurrent submissions of one job
    # share that path, and one's `tee` would truncate the file another's sbatch is reading.
    check = shell.run(["sbatch", "--test-only"], stdin=text.encode())
    if check.returncode != 0:
        raise _refused(job, shell, _err(check).removeprefix("sbatch: error: ").removeprefix("allocation failure: "))
    done = shell.run(["sbatch", "--parsable", *(["--hold"] if hold else [])], stdin=text.encode())
    if done.returncode != 0:
        raise _refused(job, shell, _err(done).removeprefix("sbatch: error: "))
    job_id = done.stdout.decode().strip().split(";")[0]
    if not job_id.isdigit():
        raise EngineError(f"sbatch answered {done.stdout.decode()!r}; expected a job id")

    def at(path: str) -> str:  # the run's folder is <workdir>/runs/<job id>
        return str(local_abs(concrete(path, p.workdir, job_id)))

    meta = {
        "prefix": list(shell.prefix),
        "login": section.login,
        "workdir": local_abs(p.workdir),
        "script": local_abs(p.script_path),
        "log": local_abs(p.output.replace("%j", job_id)),
        "run_dir": at(p.run_dir),
        "work_dir": at(p.work_dir),
        "output_dir": at(p.output_dir),
        "checkpoint_dir": at(p.checkpoint_dir),
        "container": section.container,
    }
    run = RunRef(target="slurm", native_id=job_id, job_name=job.name, meta=meta)
    if wait and not hold:
        wait_for(run, timeout=timeout, poll=poll)
    return run


def wait_for(run: RunRef, timeout: float | None = None, poll: float = 2.0) -> RunStatus:
    """Poll `status` until the run finishes (not `sbatch --wait`: a requeued job keeps its id)."""
    deadline = None if timeout is None else time.monotonic() + timeout
    while True:
        current = status(run)
        if current.state.finished:
            return current
        if deadline is not None and time.monotonic() >= deadline:
            raise EngineError(f"{run.id} still {current.state.value} after {timeout:g}s")
        time.sleep(poll)


def parse_fields(line: str) -> dict[str, str]:
    """`scontrol show job -o` text -> {key: value}; values may contain spaces (Reason, paths)."""
    keys = list(re.finditer(r"(?:^|\s)([A-Za-z][A-Za-z0-9_/:]*)=", line))
    out: dict[str, str] = {}
    for i, match in enumerate(keys):
        end = keys[i + 1].start() if i + 1 < len(keys) else len(line)
        out.setdefault(match.group(1), line[match.end() : end].strip())
    return out


def _scontrol(shell: Shell, job_id: str) -> dict[str, str] | None:
    done = shell.run(["scontrol", "show", "job", "-o", job_id], timeout=30)
    if done.returncode != 0:
        if re.search(r"Invalid job id", _err(done), re.IGNORECASE):
            return None
        raise EngineError(f"scontrol show job {job_id} failed: {_err(done)}")
    lines = [ln for ln in done.stdout.decode(errors="replace").splitlines() if ln.strip()]
    return parse_fields(lines[0]) if lines else None


def _sacct(shell: Shell, job_id: str) -> dict[str, str] | None:
    """Accounting, used only when it answers (many small clusters run without slurmdbd)."""
    try:
        done = shell.run(
            ["sacct", "-n", "-P", "-X", "-j", job_id, "-o", "JobID,State,ExitCode,Reason,NodeList"], timeout=30
        )
    except EngineError:
        return None
    if done.returncode != 0:
        return None
    for line in done.stdout.decode(errors="replace").splitlines():
        parts = line.split("|")
        if len(parts) >= 5 and parts[0] == job_id:
            return {
                "JobState": parts[1],
                "ExitCode": parts[2],
                "Reason": parts[3],
                "NodeList": parts[4],
                "Source": "sacct",
            }
    return None


def log_tail(run: RunRef, lines: int = LOG_TAIL_LINES, path: str | None = None) -> list[str]:
    path = path or run.meta.get("log")
    if not path:
        return []
    done = Shell.from_meta(run.meta).run(["tail", "-n", str(lines), "--", path], timeout=30)
    return done.stdout.decode(errors="replace").splitlines() if done.returncode == 0 else []


def _node_image_ids(shell: Shell, log: str) -> dict[str, str]:
    """{node: image ID} from the lines each node printed before the launch (podman.node_image_step)."""
    done = shell.run(["grep", "-a", "-E", "^trainctl: (node|job) ", "--", log], timeout=30)
    return node_image_ids(done.stdout.decode(errors="replace").splitlines())


def status(run: RunRef) -> RunStatus:
    shell = Shell.from_meta(run.meta)
    fields = _scontrol(shell, run.native_id) or _sacct(shell, run.native_id)
    if fields is None:
        return RunStatus(
            RunState.UNKNOWN,
            reason=f"SLURM no longer knows job {run.native_id}: finished jobs leave slurmctld after MinJobAge "
            "and accounting (sacct) is not available; see its log for the outcome",
            details={"log": run.meta.get("log")},
        )
    native = fields.get("JobState", "").split()[0] if fields.get("JobState") else ""
    state = _STATES.get(native, RunState.UNKNOWN)
    if native == "PREEMPTED" and fields.get("Requeue") == "1":
        state = RunState.QUEUED
    exit_code = fields.get("ExitCode", "")
    log = run.meta.get("log") or fields.get("StdOut")
    details: dict[str, Any] = {
        "exit_code": exit_code,
        "nodes": fields.get("NodeList", ""),
        "restarts": int(fields.get("Restarts", "0") or 0),
        "log": log,
    }
    if run.meta.get("container") == "podman" and log and state is not RunState.QUEUED:
        details.update(image_details(_node_image_ids(shell, log), "node"))
    reason = _WHY.get(native, "")
    slurm_reason = fields.get("Reason", "")
    if state == RunState.QUEUED and slurm_reason not in ("", "None"):
        reason = f"{reason + '; ' if reason else ''}waiting: {slurm_reason}"
    if details["restarts"] and state in (RunState.QUEUED, RunState.RUNNING):
        # Without this a node failure that SLURM answered with a requeue would show as plain
        # "queued"/"running": say that an attempt ended and that the trainer resumes.
        again = (
            f"requeued {details['restarts']} time(s): an attempt ended (node failure, preemption or a retry); "
            "the trainer resumes from the newest checkpoint in this run's folder"
        )
        reason = f"{again}; {reason}" if reason else again
    if state == RunState.FAILED:
        code = exit_code.split(":")[0]
        if code == str(EXIT_PREEMPTED):
            reason = (
                "the trainer was preempted and wrote a checkpoint (exit 143); continue it with "
                f"`trainctl submit JOB --target slurm --resume-from {run.id}`"
            )
        elif code == str(EXIT_BAD_INPUT):
            reason = "the trainer stopped on bad input (exit 2): config, data or model"
        elif not reason:
            reason = f"exit code {exit_code}"
        tail = log_tail(run, path=log)
        details["log_tail"] = tail
        if tail:
            reason += "; last log lines:\n" + "\n".join(tail)
    return RunStatus(state, native_state=native, reason=reason, details=details)


def logs(run: RunRef, follow: bool = False, poll: float = 1.0) -> Iterator[str]:
    """The job's log (stdout and stderr share one file); with follow, until the job ends."""
    shell = Shell.from_meta(run.meta)
    path = run.meta.get("log")
    if not path:
        fields = _scontrol(shell, run.native_id)
        path = fields.get("StdOut") if fields else None
        if not path:
            raise EngineError(f"{run.id}: no log path recorded and SLURM no longer knows the job")
    offset, pending = 0, b""
    while True:
        finished = not follow or status(run).state.finished
        done = shell.run(["tail", "-c", f"+{offset + 1}", "--", path], timeout=60)
        if done.returncode == 0:
            offset += len(done.stdout)
            pending += done.stdout
            *complete, pending = pending.split(b"\n")
            for line in complete:
                yield line.decode(errors="replace")
        elif not follow:
            raise EngineError(f"cannot read the log of {run.id} at {path}: {_err(done)}")
        if finished:
            if pending:
                yield pending.decode(errors="replace")
            return
        time.sleep(poll)


def cancel(run: RunRef) -> None:
    shell = Shell.from_meta(run.meta)
    done = shell.run(["scancel", run.native_id], timeout=30)
    message = _err(done)
    if done.returncode != 0 and not re.search(r"already completing or completed", message, re.IGNORECASE):
        raise EngineError(f"scancel {run.native_id} failed: {message}")


def summary(run: RunRef) -> dict[str, Any] | None:
    """The trainer's summary.json (world size, steps, accuracy), read where the job wrote it."""
    output = run.meta.get("output_dir")
    if not output:
        return None
    done = Shell.from_meta(run.meta).run(["cat", "--", posixpath.join(output, "summary.json")], timeout=30)
    if done.returncode != 0:
        return None
    try:
        found = json.loads(done.stdout)
    except ValueError:
        return None
    return found if isinstance(found, dict) else None

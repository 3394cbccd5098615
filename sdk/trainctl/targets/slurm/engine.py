"""Talking to SLURM: sbatch, scancel and the job's log file, through one `Shell` (shell.py); its state
comes from status.py (scontrol, sacct).
"""

from __future__ import annotations

import os
import posixpath
import re
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from ...errors import EngineError
from ...function import RESULTS
from ...runs import outputs
from ...runs import progress as progress_of
from ...runs.identity import with_identity
from ...runs.results import tar_files
from ...runs.state import Paths, Progress, RunRef, RunStatus
from ...spec.job_spec import JobSpec
from ...submit.bundle import prepare, prepared
from .handle import SlurmHandle
from .plan import SlurmPlan
from .reads import metrics_many, progress_in, progress_many
from .render import run_provenance, script
from .section import SlurmSection
from .shell import Shell, err
from .status import scontrol, status, status_many
from .words import concrete

__all__ = [
    "cancel",
    "logs",
    "metrics",
    "metrics_many",
    "progress",
    "progress_many",
    "status",
    "status_many",
    "submit",
    "submit_array",
    "summary",
    "wait_for",
]


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
    code = prepared(job)
    assert code is not None
    copy = 'cat > "$1.part" && mv -f -- "$1.part" "$1"'
    shell.text(["sh", "-c", copy, "sh", path], stdin=code.data, timeout=600)


def submit(job: JobSpec, hold: bool = False) -> RunRef:
    """Write the script into the workdir, `sbatch --parsable` it; never wait (`-O wait=true` waits in the runner,
    once the run is recorded: SlurmTarget.waits). With hold (`--resume-from`, checkpoint_copy.py) the job waits
    for `scontrol release` while its folder is filled."""
    job = with_identity(prepare(job))  # its code bundle packed, if not yet (render reads it); its uid
    section = job.section_as("slurm", SlurmSection)
    shell = Shell.for_section(section)
    text, p = script(job)
    local_abs = (lambda path: path) if shell.remote else os.path.abspath
    shell.text(["mkdir", "-p", "--", p.workdir])
    if p.code_bundle is not None:
        _copy_code(job, shell, p.code_bundle)
    shell.text(["tee", "--", p.script_path], stdin=text.encode())
    # sbatch reads the script from stdin, not from script_path: concurrent submissions of one job
    # share that path, and one's `tee` would truncate the file another's sbatch is reading.
    job_id = _sbatch(job, shell, text, hold)
    uid = _uid(job)
    paths = _paths(p, job_id, uid, local_abs)
    handle = _handle(shell, section, p.workdir, p.script_path, local_abs)
    return _ref(job, job_id, uid, paths, handle)


def submit_array(jobs: Sequence[JobSpec], parallel: int, tag: str) -> list[RunRef]:
    """A sweep's trials as one array job (array.py): the task files beside the script, one `sbatch`; one run
    per task, `<array job id>_<task id>`, each with its own folder."""
    from .array import array_script

    jobs = [with_identity(prepare(job)) for job in jobs]
    section = jobs[0].section_as("slurm", SlurmSection)
    shell = Shell.for_section(section)
    text, tasks, p, tasks_dir = array_script(jobs, parallel, tag)
    local_abs = (lambda path: path) if shell.remote else os.path.abspath
    shell.text(["mkdir", "-p", "--", p.workdir, tasks_dir])
    if p.code_bundle is not None:  # one bundle: a sweep cannot vary `code:` (spec/sweep.py)
        _copy_code(jobs[0], shell, p.code_bundle)
    for index, task in enumerate(tasks):
        shell.text(["tee", "--", posixpath.join(tasks_dir, f"task-{index}.sh")], stdin=task.encode())
    script_path = f"{tasks_dir}.sbatch"
    shell.text(["tee", "--", script_path], stdin=text.encode())
    array_id = _sbatch(jobs[0], shell, text)
    handle = _handle(shell, section, p.workdir, script_path, local_abs)
    runs = []
    for index, job in enumerate(jobs):
        task_id, uid = f"{array_id}_{index}", _uid(job)
        paths = _paths(p, task_id, uid, local_abs)
        runs.append(_ref(job, task_id, uid, paths, handle))
    return runs


def _ref(job: JobSpec, native_id: str, uid: str, paths: Paths, handle: SlurmHandle) -> RunRef:
    """The run as recorded: its provenance names what the nodes ran (render.run_provenance)."""
    return RunRef(
        target="slurm", native_id=native_id, job_name=job.name, run_uid=uid, paths=paths, handle=handle,
        provenance=run_provenance(job),
    )  # fmt: skip


def _sbatch(job: JobSpec, shell: Shell, text: str, hold: bool = False) -> str:
    """`sbatch --test-only` (a job the cluster can never run would otherwise wait in the queue forever:
    PartitionNodeLimit...), then `sbatch --parsable`, the script on stdin; the job id."""
    check = shell.run(["sbatch", "--test-only"], stdin=text.encode())
    if check.returncode != 0:
        raise _refused(job, shell, err(check).removeprefix("sbatch: error: ").removeprefix("allocation failure: "))
    done = shell.run(["sbatch", "--parsable", *(["--hold"] if hold else [])], stdin=text.encode())
    if done.returncode != 0:
        raise _refused(job, shell, err(done).removeprefix("sbatch: error: "))
    job_id = done.stdout.decode().strip().split(";")[0]
    if not job_id.isdigit():
        raise EngineError(f"sbatch answered {done.stdout.decode()!r}; expected a job id")
    return job_id


def _uid(job: JobSpec) -> str:
    assert job.run_identity is not None  # with_identity gave it one
    return job.run_identity.uid


def _paths(p: SlurmPlan, run_id: str, uid: str, local_abs: Callable[[str], str]) -> Paths:
    """The run's paths with its id and uid filled in: its folder is <workdir>/runs/<run id>-<uid>."""

    def at(path: str) -> str:
        return str(local_abs(concrete(path, p.workdir, run_id, uid)))

    return Paths(
        log=local_abs(p.output.replace("%j", run_id)),
        run_dir=at(p.run_dir),
        work_dir=at(p.work_dir),
        output_dir=at(p.output_dir),
        checkpoint_dir=at(p.checkpoint_dir),
    )


def _handle(
    shell: Shell, section: SlurmSection, workdir: str, script_path: str, local_abs: Callable[[str], str]
) -> SlurmHandle:
    return SlurmHandle(
        prefix=shell.prefix,
        login=section.login,
        workdir=local_abs(workdir),
        script=local_abs(script_path),
        container=section.container,
    )


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


def logs(run: RunRef, follow: bool = False, poll: float = 1.0) -> Iterator[str]:
    """The job's log (stdout and stderr share one file); with follow, until the job ends."""
    shell = Shell.of(run)
    path = run.paths.log
    if not path:
        path = scontrol(shell, run.native_id).get(run.native_id, {}).get("StdOut")
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
            raise EngineError(f"cannot read the log of {run.id} at {path}: {err(done)}")
        if finished:
            if pending:
                yield pending.decode(errors="replace")
            return
        time.sleep(poll)


def cancel(run: RunRef) -> None:
    shell = Shell.of(run)
    done = shell.run(["scancel", run.native_id], timeout=30)
    message = err(done)
    if done.returncode != 0 and not re.search(r"already completing or completed", message, re.IGNORECASE):
        raise EngineError(f"scancel {run.native_id} failed: {message}")


def function_results(run: RunRef) -> dict[str, bytes] | None:
    """A function job's results (runs/results.py), from the shared output folder (through `slurm.login` where set)."""
    if not run.paths.output_dir:
        return None
    folder = posixpath.join(run.paths.output_dir, RESULTS)
    done = Shell.of(run).run(["tar", "-C", folder, "-cf", "-", "."], timeout=120)
    return tar_files(done.stdout) if done.returncode == 0 else None


def _output_file(run: RunRef) -> outputs.Read:
    """A file of the job's output folder, read with `cat` on the cluster (runs/outputs.py decides what it means)."""

    def read(name: str) -> bytes | None:
        if not run.paths.output_dir:
            return None
        done = Shell.of(run).run(["cat", "--", posixpath.join(run.paths.output_dir, name)], timeout=60)
        return done.stdout if done.returncode == 0 else None

    return read


def summary(run: RunRef) -> dict[str, Any] | None:
    """The trainer's summary.json (world size, steps, accuracy), read where the job wrote it."""
    return outputs.summary(_output_file(run))


_PROGRESS_SH = 'cat -- "$1" 2>/dev/null || tail -c "$4" -- "$2" 2>/dev/null | grep -a -F -- "$3" | tail -n 1'


def progress(run: RunRef) -> Progress | None:
    """The job's progress.json in its output folder, else the last progress line of its output (a `command:`
    program may do either), in one call to the cluster (docs/contracts.md "Progress")."""
    if not run.paths.output_dir and not run.paths.log:
        return None
    found = posixpath.join(run.paths.output_dir or "/nonexistent", progress_of.FILE_NAME)
    log = run.paths.log or "/dev/null"
    argv = ["sh", "-c", _PROGRESS_SH, "sh", found, log, progress_of.LINE_MARK, str(progress_of.TAIL_BYTES)]
    return progress_in(Shell.of(run).run(argv, timeout=30).stdout.decode(errors="replace"))


def metrics(run: RunRef) -> list[dict[str, Any]] | None:
    """The trainer's metrics.jsonl in the job's output folder (None without one: the job's output is read)."""
    return outputs.metrics(_output_file(run))

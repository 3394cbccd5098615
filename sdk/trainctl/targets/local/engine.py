"""The local target's engine: run the rendered plan as a detached process group, and watch it.

`submit` starts `python -m trainctl.targets.local.supervisor RUN_DIR` in a new session; that runner starts
the job, enforces max_runtime and retries, and writes `exit.json`, so status/logs/cancel work after
the CLI has exited. Files of a run: `$TRAINCTL_HOME/runs/<id>/{spec.json,runner.json,log.txt,exit.json}`.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import signal
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ...errors import EngineError, JobError
from ...runs import outputs
from ...runs import progress as progress_of
from ...runs import records as run_records
from ...runs.identity import uid_of
from ...runs.image_ids import image_ids
from ...runs.progress import tail_lines
from ...runs.results import folder_files
from ...runs.state import Attempt, Paths, Progress, Provenance, RunRef, RunState, RunStatus
from ...runs.store import UnknownRunError, state_dir
from ...submit.bundle import prepare, prepared
from .. import detached
from ..detached import Phase, RunFolder
from ..processes import kill_all, may_signal, process_lines, read_json, run_processes, write_json
from . import container_argv as ctr
from . import container_runtime
from .handle import LocalContainer, LocalHandle
from .inputs import input_problems
from .plan import RUN_DIR, SECRETS_DIR, plan_of
from .run_files import place_in_run

if TYPE_CHECKING:
    from ...spec.job_spec import JobSpec
    from ..transfer import Fetched

RUNNER = "trainctl.targets.local.supervisor"
"""The detached runner of a local run (targets/detached.py has the folder it keeps)."""
CANCEL_GRACE_S = 15.0


def _substitute(value: Any, run_dir: Path, secrets_dir: Path) -> Any:
    if isinstance(value, str):
        value = value.replace(RUN_DIR, str(run_dir)).replace(SECRETS_DIR, str(secrets_dir))
        return value.replace(ctr.RUN_ID, run_dir.name)
    if isinstance(value, list):
        return [_substitute(v, run_dir, secrets_dir) for v in value]
    if isinstance(value, dict):
        return {k: _substitute(v, run_dir, secrets_dir) for k, v in value.items()}
    return value


def new_run_id(job_name: str) -> str:
    return f"{time.strftime('%Y%m%d-%H%M%S')}-{job_name}-{secrets.token_hex(2)}"


def runs_dir() -> Path:
    return state_dir() / "runs"


def submit(job: JobSpec, checkpoint: tuple[Path, str] | None = None) -> RunRef:
    """Start the run in the background and return at once; the run is `queued` until the job process starts.
    `checkpoint` (`--resume-from`: a folder and the subfolder it goes to) is copied into the run's own
    checkpoint folder before the run starts, so its newest step is where `resume: auto` looks."""
    job = prepare(job)  # its code bundle packed, if not yet (render reads it)

    plan = plan_of(job)
    secrets_dir = state_dir() / "secrets"
    problems = input_problems(job)
    if problems:
        raise JobError(problems)
    if plan.container:
        runtime = plan.container.runtime
        container_runtime.require_runtime(runtime)
        container_runtime.image_id(runtime, plan.container.image)
    native_id = new_run_id(job.name)
    run_dir = runs_dir() / native_id
    run_dir.mkdir(mode=0o700, parents=True)
    spec = _substitute(plan.to_dict(), run_dir, secrets_dir)
    spec["job_name"] = job.name
    if plan.code:
        code = prepared(job)
        assert code is not None
        Path(spec["code"]["bundle"]).write_bytes(code.data)  # the launcher checks it against plan's sha256
    if spec["container"]:
        spec["container"] = _create_container(spec, run_dir)
    write_json(run_dir / "spec.json", spec)
    if checkpoint is not None:
        place_in_run(spec, *checkpoint)
    try:
        proc = RunFolder(run_dir, RUNNER).start()
    except OSError as exc:
        raise EngineError(f"could not start the local runner: {exc}") from None
    paths = Paths(
        run_dir=str(run_dir),
        log=str(run_dir / "log.txt"),
        output_dir=spec["output_dir"],
        checkpoint_dir=spec["checkpoint_dir"],
        work_dir=spec["cwd"],
    )
    container = LocalContainer.model_validate(spec["container"]) if spec["container"] else None
    return RunRef(
        target="local",
        native_id=native_id,
        job_name=job.name,
        run_uid=uid_of(job),
        paths=paths,
        provenance=Provenance.model_validate_json(plan.provenance),
        handle=LocalHandle(pid=proc.pid, container=container),
    )


def _create_container(spec: dict[str, Any], run_dir: Path) -> dict[str, Any]:
    """Create the run's container (exit 1 with the runtime's words, and no run left behind, if it cannot)."""
    import shutil

    try:
        env = dict(spec["env"])
        for name, path in spec["secret_files"].items():
            env[name] = Path(path).read_text().rstrip("\n")
        # code: the launcher's unpacked copy and venvs; s3:// inputs: the container's data cache
        extra = [spec["container"].get(key) for key in ("code_work", "data_cache")]
        folders = [spec["output_dir"], spec["checkpoint_dir"], spec["cwd"], *filter(None, extra)]
        container_runtime.give_to_trainer(folders)
        info = container_runtime.create(spec, env)
    except BaseException:
        shutil.rmtree(run_dir, ignore_errors=True)
        raise
    spec["argv"] = container_runtime.start_argv(info)
    return info


def _run_dir(run: RunRef) -> Path:
    path = Path(run.paths.run_dir) if run.paths.run_dir else runs_dir() / run.native_id
    if not (path / "spec.json").is_file():
        raise UnknownRunError(f"{run.id}: no such local run (looked in {path})")
    return path


def _runner_alive(run: RunRef, folder: RunFolder) -> bool:
    return folder.runner_alive(LocalHandle.of(run).pid)


def status(run: RunRef) -> RunStatus:
    """The run's state, with what the trainer left about how it went (slow nodes, a hang's verdict)."""
    run_dir = _run_dir(run)
    spec = read_json(run_dir / "spec.json") or {}
    found = _status(run, run_dir, spec)
    return found.model_copy(update={**_records(spec.get("output_dir")), **_attempts(run_dir, found.state)})


def _attempts(run_dir: Path, state: RunState) -> dict[str, Any]:
    """The runner's record of each attempt (exit.json once it ended, state.json while it runs). Of a run that
    ended without its runner, the open attempt ended with it, by its log's last write."""
    done = read_json(run_dir / "exit.json") or read_json(run_dir / "state.json") or {}
    entries = done.get("attempts") if isinstance(done, dict) else None
    if not isinstance(entries, list):
        return {}
    attempts = [Attempt.model_validate(e) for e in entries if isinstance(e, dict)]
    if state.finished:
        ended = _last_write(run_dir / "log.txt")
        attempts = [a if a.ended_at else a.model_copy(update={"state": state, "ended_at": ended}) for a in attempts]
    return {"attempts": attempts}


def _last_write(path: Path) -> float | None:
    try:
        return path.stat().st_mtime
    except OSError:
        return None


def _ended_unseen(run_dir: Path, spec: dict[str, Any], log: str, images: Any) -> RunStatus:
    """Neither the runner nor a process of the job is left, and no exit status was recorded. The trainer's
    summary.json, written once its last step is done (after the check that the replicas agree), says whether
    the job finished; its exit code is lost with the runner either way."""
    started = (read_json(run_dir / "state.json") or {}).get("started_at") or 0.0
    output = spec.get("output_dir")
    summary = Path(output) / run_records.SUMMARY if output else None
    written = _last_write(summary) if summary else None
    if written is not None and written >= started:
        return RunStatus(
            state=RunState.SUCCEEDED, native_state="finished, runner lost", log=log, images=images,
            reason=f"the runner was gone before the job ended, so no exit code was recorded; the trainer finished "
            f"(it wrote {summary} at {time.strftime('%H:%M:%S', time.gmtime(written))} UTC)",
        )  # fmt: skip
    return RunStatus(
        state=RunState.FAILED, native_state="lost", log=log, images=images,
        reason="the runner process ended without recording an exit status, the job's processes are gone too, and "
        f"the trainer wrote no summary.json: it did not finish (see the end of {log})",
    )  # fmt: skip


def _status(run: RunRef, run_dir: Path, spec: dict[str, Any]) -> RunStatus:
    log = str(run_dir / "log.txt")
    container = spec.get("container") or {}
    images = None
    if container.get("name"):  # local.container: the image ID the runtime created the container from
        images = image_ids({container["name"]: container.get("image_id", "")}, "container")
    folder = RunFolder(run_dir, RUNNER)
    phase = folder.phase(run.created_at, _runner_alive(run, folder))
    done = folder.outcome()
    if phase is Phase.ENDED and done is not None:
        state = RunState(done["state"])
        code = done.get("exit_code")
        details = {k: v for k, v in done.items() if k not in ("state", "reason", "exit_code", "attempts")}
        native = f"exit {code}" if code is not None else state.value
        return RunStatus(
            state=state, native_state=native, reason=done.get("reason", ""), exit_code=code, log=log, images=images,
            details=details,
        )  # fmt: skip
    started = folder.started()
    if phase is Phase.RUNNING and started is not None:
        details = {k: v for k, v in started.items() if k not in ("state", "attempts")}
        reason = f"attempt {started.get('attempt', 1)}"
        return RunStatus(
            state=RunState.RUNNING, native_state="running", reason=reason, log=log, images=images, details=details
        )
    if phase in (Phase.QUEUED, Phase.RUNNING):
        return RunStatus(state=RunState.QUEUED, native_state="starting", log=log, images=images)
    left = run_processes(run_dir, read_json(run_dir / "job.pid"))
    if left:  # killed (kill -9, the OOM killer) while its job lives on: say so, with the pids
        return RunStatus(
            state=RunState.RUNNING,
            native_state="runner lost",
            reason=f"the runner (pid {folder.runner_pid(LocalHandle.of(run).pid)}) is gone, but the job's processes "
            f"still run: {'; '.join(process_lines(left))}. Nothing enforces max_runtime or retries now; "
            f"`trainctl cancel {run.id}` stops them",
            log=log,
            images=images,
            details={"pids": [p.pid for p in left]},
        )
    return _ended_unseen(run_dir, spec, log, images)


def _records(output_dir: str | None) -> dict[str, Any]:
    """`slow_nodes` and `failure` from the run's output folder (docs/contracts.md section 2), when there."""
    if not output_dir:
        return {}
    found: dict[str, Any] = {}
    slow = run_records.slow_nodes(read_json(Path(output_dir) / run_records.SLOW_NODES))
    if slow:
        found["slow_nodes"] = slow
    failure = run_records.failure(read_json(Path(output_dir) / run_records.FAILURE))
    if failure:
        found["failure"] = failure
    return found


def _finished(run: RunRef, run_dir: Path) -> bool:
    """Ended, or nothing of it left: a runner that died while its job lives on has not finished."""
    folder = RunFolder(run_dir, RUNNER)
    return folder.ended(
        lambda: _runner_alive(run, folder) or bool(run_processes(run_dir, read_json(run_dir / "job.pid")))
    )


def logs(run: RunRef, follow: bool = False) -> Iterator[str]:
    """Lines of log.txt; with follow, keep reading until the run has finished and the file is drained."""
    run_dir = _run_dir(run)
    for _, line in detached.follow({"log": run_dir / "log.txt"}, lambda: _finished(run, run_dir), follow):
        yield line


def cancel(run: RunRef, grace_s: float = CANCEL_GRACE_S) -> None:
    """SIGTERM the run (the trainer checkpoints), SIGKILL whatever is left after the grace, remove its
    container; EngineError (exit 1) naming each process that survived. The run's processes are found
    themselves (processes.run_processes), so a run whose runner died is stopped too."""
    run_dir = _run_dir(run)
    job = read_json(run_dir / "job.pid")
    folder = RunFolder(run_dir, RUNNER)
    ended = folder.phase(run.created_at, _runner_alive(run, folder)) in (Phase.ENDED, Phase.LOST)
    if ended and not run_processes(run_dir, job) and not folder.cancel_requested:
        return  # it ended by itself, recorded or not (a lost runner's run reads from what it left): nothing to do
    folder.request_cancel()
    pid = folder.runner_pid(LocalHandle.of(run).pid)
    if pid is not None and _runner_alive(run, folder):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGTERM)  # it SIGTERMs the job, and SIGKILLs it after its own grace
        _until(lambda: not _runner_alive(run, folder), grace_s + 10)
        if _runner_alive(run, folder):
            kill_all([pid], signal.SIGKILL)
    _stop(run_dir, job, grace_s)
    folder.reap(5)
    survived = process_lines(run_processes(run_dir, job))
    info = (read_json(run_dir / "spec.json") or {}).get("container")
    if info:
        container_runtime.remove(info)
        if container_runtime.exists(info):
            survived.append(f"container {info['name']} ({info['runtime']} rm --force did not remove it)")
    if survived:
        raise EngineError(
            f"{run.id}: cancel could not stop every process of the run; still there: {'; '.join(survived)}",
            hint="a process of another user, or one stuck in the kernel (state D): stop it as its owner or root",
        )
    if folder.outcome() is None:
        reason = "killed by trainctl cancel" if folder.started() else "cancelled before the job started"
        folder.record({"state": "cancelled", "exit_code": None, "reason": reason})


def _until(done: Callable[[], bool], timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while not done() and time.monotonic() < deadline:
        time.sleep(0.1)


def _stop(run_dir: Path, job: dict[str, Any] | None, grace_s: float) -> None:
    """What is left of the run without its runner: SIGTERM to the job process (the launcher, which passes it
    to the workers; they checkpoint), else to each one, and SIGCONT to all; after the grace SIGKILL to all."""
    left = run_processes(run_dir, job)
    if not left:
        return
    top = [p.pid for p in left if job and p.pid == job.get("pid")]
    kill_all(top or [p.pid for p in left], signal.SIGTERM)
    # a stopped process acts on SIGTERM only once continued (the shell's `kill` of a stopped job does the same);
    # without this, a SIGSTOPped worker would sit out the whole grace and then lose its checkpoint to SIGKILL
    kill_all([p.pid for p in left], signal.SIGCONT)
    beyond_reach = {p.pid for p in left if not may_signal(p.pid)}  # cancel reports them; no grace can help

    def stopped() -> bool:
        return all(p.pid in beyond_reach for p in run_processes(run_dir, job))

    _until(stopped, grace_s)
    kill_all([p.pid for p in run_processes(run_dir, job)], signal.SIGKILL)
    _until(stopped, 5)


def _output_dir(run: RunRef) -> str | None:
    return run.paths.output_dir or (read_json(_run_dir(run) / "spec.json") or {}).get("output_dir")


def summary(run: RunRef) -> dict[str, Any] | None:
    """The trainer's summary.json (accuracy, steps, checkpoint), when the run wrote one."""
    return outputs.summary(outputs.folder(_output_dir(run)))


def function_results(run: RunRef) -> dict[str, bytes] | None:
    """A function job's results (runs/results.py), in the run's output folder."""
    return folder_files(_output_dir(run))


def metrics(run: RunRef) -> list[dict[str, Any]] | None:
    """The trainer's metrics.jsonl in the run's output folder (None without one: a command job's log is read)."""
    return outputs.metrics(outputs.folder(_output_dir(run)))


def progress(run: RunRef) -> Progress | None:
    """The run's progress.json in its output folder, else the last progress line of its log (a `command:`
    program may do either; docs/contracts.md "Progress")."""
    found = outputs.progress(outputs.folder(_output_dir(run)))
    return found or progress_of.last_in(tail_lines(_run_dir(run) / "log.txt"))


def fetch_output(run: RunRef, dest: Path) -> Fetched:
    """The run's output folder, copied (`trainctl pull`): it is on this machine already."""
    import shutil

    from ..transfer import Fetched

    output = _output_dir(run)
    if not output or not Path(output).is_dir():
        raise EngineError(f"{run.id}: its output folder {output or '(none recorded)'} does not exist (removed?)")
    shutil.copytree(output, dest, dirs_exist_ok=True)
    return Fetched(dest, output)


__all__ = ["cancel", "fetch_output", "logs", "metrics", "progress", "status", "submit", "summary"]

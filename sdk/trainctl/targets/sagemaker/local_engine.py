"""`trainctl submit --target sagemaker -O local=true`: the rendered request run as containers here, detached.

`submit` renders the request exactly as for AWS, checks the runtime and the image, fetches the S3
channels (the job's code bundle goes straight into the `code` channel), creates the network and the
containers algo-1..N (local_hosts.py), then starts `python -m trainctl.targets.sagemaker.local_supervisor
RUN_DIR` in a new session, which starts them, streams each host's log and writes exit.json. status,
logs and cancel read that folder: `$TRAINCTL_HOME/runs/sagemaker-local/<training job name>/`.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import time
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ...errors import EngineError
from ...runs import outputs
from ...runs.identity import uid_of
from ...runs.image_ids import image_ids
from ...runs.results import folder_files
from ...runs.state import Paths, Progress, RunRef, RunState, RunStatus
from ...runs.store import UnknownRunError, state_dir
from .. import detached
from ..detached import Phase, RunFolder
from . import local_hosts
from .causes import attempts, failure_of
from .handle import SageMakerHandle
from .request import build_request

if TYPE_CHECKING:
    import boto3

    from ...spec.job_spec import JobSpec
    from ..transfer import Accept, Fetched

RUNNER = "trainctl.targets.sagemaker.local_supervisor"
CANCEL_GRACE_S = 15.0
LOG_DIR = "logs"


def runs_dir() -> Path:
    return state_dir() / "runs" / "sagemaker-local"


def submit(job: JobSpec, name: str, session: boto3.Session, runtime: str = "podman") -> RunRef:
    """Everything before the containers start, here (exit 1 with nothing recorded if any of it fails)."""
    from ...submit.bundle import prepared

    request = build_request(job, name, local=True)
    image = request["AlgorithmSpecification"]["TrainingImage"]
    local_hosts.image_id(runtime, image)  # before any download: a missing image costs nothing
    run_dir = runs_dir() / name
    run_dir.mkdir(mode=0o700, parents=True)
    from botocore.exceptions import BotoCoreError, ClientError

    try:
        code = prepared(job)
        cluster = local_hosts.prepare(
            request,
            image=image,
            root=run_dir,
            runtime=runtime,
            s3=session.client("s3"),
            code=code.data if code else None,
        )
        created = local_hosts.create(cluster, request)
    except (BotoCoreError, ClientError) as exc:
        shutil.rmtree(run_dir, ignore_errors=True)
        raise EngineError(
            f"fetching the input channels from S3: {exc}", hint="check data.* and your AWS access"
        ) from exc
    except BaseException:
        shutil.rmtree(run_dir, ignore_errors=True)
        raise
    cluster.save(run_dir / "cluster.json")
    (run_dir / LOG_DIR).mkdir()
    try:
        proc = RunFolder(run_dir, RUNNER).start()
    except OSError as exc:
        local_hosts.remove(cluster)
        raise EngineError(f"could not start the local SageMaker runner: {exc}") from None
    handle = SageMakerHandle(
        local=True,
        pid=proc.pid,
        runtime=runtime,
        image=image,
        image_id=created[cluster.hosts[0]],  # what local mode created every container from
        image_ids=created,
        containers=dict(cluster.names),
        network=cluster.network,
    )
    paths = Paths(run_dir=str(run_dir))
    return RunRef(
        target="sagemaker",
        native_id=f"local/{name}",
        job_name=job.name,
        run_uid=uid_of(job),
        paths=paths,
        handle=handle,
    )


def _run_dir(run: RunRef) -> Path:
    path = Path(run.paths.run_dir or runs_dir() / run.native_id.removeprefix("local/"))
    if not (path / "cluster.json").is_file():
        raise UnknownRunError(f"{run.id}: no such local SageMaker run (looked in {path})")
    return path


def _folder(run: RunRef) -> RunFolder:
    return RunFolder(_run_dir(run), RUNNER)


def _runner_alive(run: RunRef, folder: RunFolder) -> bool:
    return folder.runner_alive(SageMakerHandle.of(run).pid)


def status(run: RunRef) -> RunStatus:
    """runner alive: queued until the containers start, then running; exit.json: how it ended."""
    folder = _folder(run)
    handle = SageMakerHandle.of(run)
    images = image_ids(handle.image_ids, "container")
    details: dict[str, Any] = {"containers": " ".join(handle.containers.values())}

    def said(state: RunState, native: str, reason: str = "") -> RunStatus:
        return RunStatus(state=state, native_state=native, reason=reason, images=images, details=details)

    phase = folder.phase(run.created_at, _runner_alive(run, folder))
    if phase is Phase.RUNNING:
        return said(RunState.RUNNING, "InProgress/Training")
    if phase is Phase.QUEUED:
        return said(RunState.QUEUED, "InProgress/Starting")
    done = folder.outcome()
    if done is None:
        state, native_state, why, exited = _without_runner(run, folder)
        if exited:
            details["exit_codes"] = exited
        return said(state, native_state, why)
    details["exit_codes"] = done.get("exit_codes")
    if done.get("model_artifacts"):
        details["model_artifacts"] = done["model_artifacts"]
    native = (
        done.get("native_state")
        or {"succeeded": "Completed", "failed": "Failed", "cancelled": "Stopped"}[done["state"]]
    )
    found = said(RunState(done["state"]), native, done.get("reason", ""))
    codes = [c for c in (done.get("exit_codes") or {}).values() if isinstance(c, int) and c != 0]
    reason = f"AlgorithmError: {done['reason']}" if done.get("failure") else done.get("reason", "")
    secondary = native.partition("/")[2]
    return found.model_copy(update={
        "attempts": attempts(run.native_id, found.state, reason, secondary, codes[0] if codes else None),
        "failure": failure_of(reason),
    })  # fmt: skip


def _without_runner(run: RunRef, folder: RunFolder) -> tuple[RunState, str, str, dict[str, int]]:
    """The runner is gone (kill -9, the OOM killer) and recorded nothing: the containers, which outlive it, say
    where the job stands. (state, SageMaker's status, reason, the exit codes of the hosts that exited)."""
    cluster = local_hosts.Cluster.load(folder.path / "cluster.json")
    hosts = local_hosts.host_states(cluster)
    runner = f"the runner (pid {folder.runner_pid(SageMakerHandle.of(run).pid)}) is gone"
    alive = [host for host, (state, _) in hosts.items() if state in local_hosts.ALIVE]
    codes = {host: code for host, (_, code) in hosts.items() if code is not None}
    if alive:
        why = f"{runner}, but {', '.join(alive)} still run: nothing enforces MaxRuntimeInSeconds or archives the "
        return RunState.RUNNING, "InProgress/Training", why + f"model now; `trainctl cancel {run.id}` stops them", codes
    if len(codes) == len(hosts) and not any(codes.values()):
        why = f"{runner} and recorded nothing, but every host exited 0; the model was not archived into model.tar.gz "
        return RunState.SUCCEEDED, "Completed", why + "(`trainctl pull` reads the first host's /opt/ml/model)", codes
    if codes:
        ends = [f"{host} exited {code}" for host, code in codes.items() if code]
        ends += [f"{host} {state}" for host, (state, code) in hosts.items() if code is None]
        said = f"{runner} and recorded nothing; {', '.join(ends)}"
        headline = (local_hosts.failure(cluster) or "").partition("\n")[0]
        return RunState.FAILED, "Failed", f"{said}; {headline}" if headline else said, codes
    return RunState.FAILED, "Failed", "the runner process ended without recording an exit status", codes


def logs(run: RunRef, follow: bool = False, poll_s: float = 0.2) -> Iterator[str]:
    """Each host's container log, lines prefixed `[algo-N] ` (SageMaker's per-host streams); with follow,
    until the run has ended and every file is drained."""
    folder = _folder(run)
    hosts = list(SageMakerHandle.of(run).containers or local_hosts.Cluster.load(folder.path / "cluster.json").names)
    files = {host: folder.path / LOG_DIR / f"{host}.log" for host in hosts}
    ended = lambda: folder.ended(lambda: _runner_alive(run, folder))  # noqa: E731
    for host, line in detached.follow(files, ended, follow, poll_s):
        yield f"[{host}] {line}"


def cancel(run: RunRef, grace_s: float = CANCEL_GRACE_S) -> None:
    """StopTrainingJob, here: SIGTERM to every container (the trainer checkpoints), SIGKILL and removal
    after the grace; the runner records `cancelled`."""
    folder = _folder(run)
    if folder.outcome() is not None:
        return
    cluster = local_hosts.Cluster.load(folder.path / "cluster.json")
    lost = folder.phase(run.created_at, _runner_alive(run, folder)) is Phase.LOST
    if (
        lost
        and not folder.cancel_requested
        and all(c is not None for _, c in local_hosts.host_states(cluster).values())
    ):
        return  # every host ended by itself while the runner was gone: nothing to stop, status says how it ended
    folder.request_cancel()
    local_hosts.signal_all(cluster, "TERM")
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline and any(
        state in local_hosts.ALIVE for state, _ in local_hosts.host_states(cluster).values()
    ):
        time.sleep(0.5)
    local_hosts.remove(cluster)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and not folder.ended(lambda: _runner_alive(run, folder)):
        time.sleep(0.2)
    pid = folder.runner_pid(SageMakerHandle.of(run).pid)
    if pid is not None and _runner_alive(run, folder):  # still busy after its containers are gone: stop it
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pid, signal.SIGKILL)
    if folder.outcome() is None:
        folder.record({"state": "cancelled", "reason": "stopped by trainctl cancel"})


def _model_dirs(run: RunRef) -> list[Path]:
    """Where TRAINER_OUTPUT_DIR (/opt/ml/model on SageMaker) is: the uploaded artifacts, then each host's."""
    run_dir = _run_dir(run)
    cluster = local_hosts.Cluster.load(run_dir / "cluster.json")
    return [run_dir / "artifacts" / "model", *(cluster.tree(h) / "model" for h in cluster.hosts)]


def fetch_output(run: RunRef, dest: Path) -> Fetched:
    """The run's /opt/ml/model: the merged artifacts once the run has ended, else the first host's."""
    from ..transfer import Fetched

    for place in _model_dirs(run):
        if place.is_dir() and any(place.iterdir()):
            shutil.copytree(place, dest, dirs_exist_ok=True)
            return Fetched(dest, str(place))
    raise EngineError(f"{run.id}: no host wrote anything to /opt/ml/model (the run's folder: {_run_dir(run)})")


def fetch_checkpoints(run: RunRef, dest: Path, accept: Accept | None = None) -> Fetched:
    """`--resume-from` a `local=true` run: its checkpoints are the first host's (rank 0 writes them) /opt/ml/checkpoints."""
    from ..transfer import ResumeError, fetch_folder

    saved = Path(run.paths.run_dir or "") / "cluster.json"
    if not saved.is_file():
        raise ResumeError(f"--resume-from {run.id}: its local run folder is gone ({saved} is missing)")
    cluster = local_hosts.Cluster.load(saved)
    return fetch_folder(cluster.tree(cluster.hosts[0]) / "checkpoints", dest, accept)


def function_results(run: RunRef) -> dict[str, bytes] | None:
    """A function job's results: each host writes its ranks' into its model folder (the uploaded copy wins)."""
    found: dict[str, bytes] = {}
    for place in reversed(_model_dirs(run)):
        found.update(folder_files(place) or {})
    return found or None


def summary(run: RunRef) -> dict[str, Any] | None:
    """The trainer's summary.json: it writes it into TRAINER_OUTPUT_DIR, /opt/ml/model on SageMaker."""
    return next(filter(None, (outputs.summary(outputs.folder(place)) for place in _model_dirs(run))), None)


def progress(run: RunRef) -> Progress | None:
    """The newest progress.json of the run's hosts (the trainer's rank 0 writes it into its model folder)."""
    found = [p for p in (outputs.progress(outputs.folder(place)) for place in _model_dirs(run)) if p]
    return max(found, key=lambda p: (p.step or 0, p.updated_at or 0), default=None)


def metrics(run: RunRef) -> list[dict[str, Any]] | None:
    """The trainer's metrics.jsonl from the first host folder that has rows (rank 0 writes it)."""
    return next(filter(None, (outputs.metrics(outputs.folder(place)) for place in _model_dirs(run))), None)

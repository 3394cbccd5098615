"""A Kubernetes run that trainctl retries itself: each attempt a new object, kept off the nodes earlier
attempts blamed.

The operators' own restarts cannot leave a node out: a PyTorchJob's OnFailure restarts the same container
in the same pod, and a JobSet restart recreates the pods, which the scheduler may put back on the bad node.
So `submit` with `retries` renders the job with the operators' restarts off (as `retries: 0`: runtime
`trainctl-torch-r0`, restartPolicy Never), creates the first attempt's object `<run>` itself (its errors
reach the user at once), and starts the retry driver (`python -m trainctl.targets.kubernetes.driver
RUN_DIR`, driver.py) on this machine, in a session of its own. The driver watches each attempt, classifies
its end from its pods (causes.py: exit codes, and the trainer's failure record from the containers'
termination messages), and creates the next as `<run>-a2`, `<run>-a3`, ... with a required node
anti-affinity against every node blamed so far, seeded from the previous attempt's checkpoint folder on the
PVC (seed.py). Its folder is detached.RunFolder's, the local runner's lifecycle:

    spec.json    the cluster, the first object, retries and retry_on
    job.pickle   the job as submitted (its code bundle included: every attempt runs the same code)
    runner.json, state.json (the current attempt's object and every attempt so far), cancel, exit.json

`trainctl status` reads the current attempt's object (`cluster_for`) and the driver's record (`overlay`).
"""

from __future__ import annotations

import pickle
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ...errors import EngineError
from ...run_state import Attempt, RunRef, RunState, RunStatus
from ...run_store import state_dir
from ...spec import JobSpec
from ..detached import Phase, RunFolder
from ..processes import write_json
from .handle import KubernetesHandle

DRIVER = "trainctl.targets.kubernetes.driver"
SPEC, JOB = "spec.json", "job.pickle"


def without_operator_restarts(job: JobSpec) -> JobSpec:
    """The job as each attempt's object is rendered: no in-place restarts (the driver retries)."""
    return job.model_copy(update={"retries": 0})


def attempt_name(first: str, number: int) -> str:
    """Attempt 1 is the run's own object; attempt N its `-aN` (the PVC folder of each is its name)."""
    return first if number == 1 else f"{first}-a{number}"


def start(job: JobSpec, create: Callable[..., RunRef], *, context: str | None = None, namespace: str | None = None,
          kubeconfig: str | None = None, force: bool = False, seed: str | None = None) -> RunRef:  # fmt: skip
    """Create attempt 1 (`create`: engine.create) and start the driver that retries it."""
    run = create(without_operator_restarts(job), context=context, namespace=namespace, kubeconfig=kubeconfig,
                 force=force, seed=seed)  # fmt: skip
    handle = KubernetesHandle.of(run)
    ns, name = run.native_id.split("/", 1)
    run_dir = state_dir() / "kubernetes-runs" / f"{ns}.{name}.{run.run_uid}"  # names repeat (engine.py _free_name)
    run_dir.mkdir(mode=0o700, parents=True)
    (run_dir / JOB).write_bytes(pickle.dumps(job))
    spec = {"context": handle.context, "namespace": ns, "kubeconfig": kubeconfig, "api": handle.api,
            "first": name, "first_started_at": run.created_at, "retries": job.retries,
            "retry_on": [c.value for c in job.retry_on], "pvc": handle.pvc,
            "checkpoint_dir": run.paths.checkpoint_dir}  # fmt: skip
    write_json(run_dir / SPEC, spec)
    try:
        proc = RunFolder(run_dir, DRIVER).start()
    except OSError as exc:
        raise EngineError(f"created {run.native_id}, but could not start its retry driver: {exc}") from None
    return run.model_copy(
        update={"handle": handle.model_copy(update={"driver_dir": str(run_dir), "driver_pid": proc.pid})}
    )


def folder_of(run: RunRef) -> RunFolder | None:
    handle = KubernetesHandle.of(run)
    return RunFolder(Path(handle.driver_dir), DRIVER) if handle.driver_dir else None


def record(folder: RunFolder) -> dict[str, Any]:
    """The driver's last word: exit.json once it ended, else state.json (the attempt it watches)."""
    from ..processes import read_json

    found = folder.outcome() or read_json(folder.path / "state.json")
    return found if isinstance(found, dict) else {}


def current_object(run: RunRef) -> str:
    """The object of the run's current (or last) attempt: what status, logs and cancel read."""
    folder = folder_of(run)
    found = record(folder).get("object") if folder is not None else None
    return str(found) if found else run.native_id.partition("/")[2]


def attempts(found: dict[str, Any]) -> list[Attempt]:
    return [Attempt.model_validate(e) for e in found.get("attempts") or [] if isinstance(e, dict)]


def overlay(run: RunRef, inner: RunStatus) -> RunStatus:
    """The run's status: the current attempt's object (`inner`) under the driver's word. Ended: the driver's
    outcome. Running: the object's state, or, between an attempt's end and the next object, running with
    what the driver is doing. Driver gone without an outcome: said, with the object's state."""
    folder = folder_of(run)
    if folder is None:
        return inner
    found = record(folder)
    update: dict[str, Any] = {"attempts": attempts(found)}
    phase = folder.phase(run.created_at, folder.runner_alive(KubernetesHandle.of(run).driver_pid))
    number = found.get("attempt") or len(update["attempts"]) or 1
    if phase is Phase.ENDED:
        update |= {"state": RunState(found["state"]), "reason": found.get("reason") or inner.reason,
                   "exit_code": found.get("exit_code")}  # fmt: skip
    elif phase is Phase.LOST:
        lost = "the retry driver is gone without recording an outcome: no further attempt will start"
        state = inner.state if inner.state is not RunState.UNKNOWN else RunState.FAILED
        update |= {"state": state, "reason": f"{lost}; attempt {number}: {inner.reason}".rstrip(": ")}
    elif inner.state.finished:
        update |= {"state": RunState.RUNNING, "reason": f"attempt {number} ended ({inner.state.value}); "
                                                          "the retry driver decides the next"}  # fmt: skip
    else:
        update |= {"reason": f"attempt {number}: {inner.reason}".rstrip(": ")}
    return inner.model_copy(update=update)


def stop_driver(run: RunRef) -> None:
    """`trainctl cancel`: the cancel file first (the driver starts no further attempt), then SIGTERM."""
    import contextlib
    import os
    import signal

    folder = folder_of(run)
    if folder is None:
        return
    folder.request_cancel()
    pid = folder.runner_pid(KubernetesHandle.of(run).driver_pid)
    if pid is not None and folder.runner_alive(pid):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGTERM)

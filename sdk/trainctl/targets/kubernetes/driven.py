"""A Kubernetes run that trainctl retries itself: each attempt a new object, kept off the nodes earlier
attempts blamed (attempts.py says how the run lives on its object; reconcile.py the steps).

The operators' own restarts cannot leave a node out: a PyTorchJob's OnFailure restarts the same container
in the same pod, and a JobSet restart recreates the pods, which the scheduler may put back on the bad node.
So a job with `retries` renders with those restarts off and the label `trainctl.dev/retries`, and
whoever drives the run creates attempt N as `<run>-aN`. In a cluster that runs trainctl's controller
(controller.py, k8s/controller.yaml), the controller drives every such object, however it was created, and
nothing runs on the submitting machine. Without one, `trainctl submit` says so and starts the retry driver
(`python -m trainctl.targets.kubernetes.driver RUN_DIR`, driver.py) on this machine, in a session of its
own: the same steps, for this one run, for as long as this machine stays up. `trainctl k8s apply` starts
no driver: the object waits for a controller.

`trainctl status`, from any machine, reads the attempts from the run's object (`overlay`); a run whose
driver is gone (the controller's lock not renewed; this machine's driver process ended) says so.
"""

from __future__ import annotations

import contextlib
import os
import signal
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ...errors import EngineError
from ...runs.state import RunRef, RunState, RunStatus
from ...runs.store import state_dir
from ...spec.job_spec import JobSpec
from ..detached import Phase, RunFolder
from ..processes import read_json, write_json
from .attempts import is_driven, record_of
from .cluster import Cluster, connect
from .handle import KubernetesHandle
from .presence import controller_for

DRIVER = "trainctl.targets.kubernetes.driver"
SPEC = "spec.json"


def start(job: JobSpec, create: Callable[..., RunRef], *, context: str | None = None, namespace: str | None = None,
          kubeconfig: str | None = None, force: bool = False, seed: str | None = None) -> RunRef:  # fmt: skip
    """Create the run's object (`create`: engine.create); without a controller, start this machine's driver."""
    run = create(job, context=context, namespace=namespace, kubeconfig=kubeconfig, force=force, seed=seed)
    handle = KubernetesHandle.of(run)
    ns, name = run.native_id.split("/", 1)
    presence = controller_for(connect(handle.context, ns, kubeconfig), ns)
    if presence.answers:
        return run
    warnings.warn(f"{run.id}: {presence.words}; this machine drives its retries, and if it goes away no further "
                  "attempt starts (install the controller with `kubectl apply -k k8s/`)", stacklevel=3)  # fmt: skip
    run_dir = state_dir() / "kubernetes-runs" / f"{ns}.{name}.{run.run_uid}"  # names repeat (engine.py _free_name)
    run_dir.mkdir(mode=0o700, parents=True)
    write_json(run_dir / SPEC, {"context": handle.context, "namespace": ns, "kubeconfig": kubeconfig,
                                "api": handle.api, "first": name})  # fmt: skip
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
    """This machine's driver's last word: exit.json once it ended, else state.json (the attempt it watches)."""
    found = folder.outcome() or read_json(folder.path / "state.json")
    return found if isinstance(found, dict) else {}


def overlay(run: RunRef, cluster: Cluster, root: dict[str, Any] | None, inner: RunStatus) -> RunStatus:
    """The run's status: the current attempt's object (`inner`) under the record on the run's object `root`
    (or, once `trainctl cancel` deleted it, this machine's driver's record)."""
    folder = folder_of(run)
    if not is_driven(root):
        return _from_folder(run, folder, inner) if folder is not None else inner
    assert root is not None
    found = record_of(root)
    number = found.current
    update: dict[str, Any] = {"attempts": found.ended}
    if found.outcome is not None:
        return inner.model_copy(update=update | {"state": RunState(found.outcome["state"]),
                                                 "reason": found.outcome.get("reason") or inner.reason,
                                                 "exit_code": found.outcome.get("exit_code")})  # fmt: skip
    gone = _driver_gone(run, folder, cluster)
    if gone:
        state = inner.state if inner.state is not RunState.UNKNOWN else RunState.FAILED
        return inner.model_copy(
            update=update | {"state": state, "reason": f"{gone}; attempt {number}: {inner.reason}".rstrip(": ")}
        )
    if inner.state.finished:
        return inner.model_copy(update=update | {"state": RunState.RUNNING, "reason": f"attempt {number} ended "
                                                 f"({inner.state.value}); its driver decides the next"})  # fmt: skip
    return inner.model_copy(update=update | {"reason": f"attempt {number}: {inner.reason}".rstrip(": ")})


def _driver_gone(run: RunRef, folder: RunFolder | None, cluster: Cluster) -> str:
    """Why no one will start the next attempt, or '' (a driver answers)."""
    if folder is not None:
        if folder.phase(run.created_at, folder.runner_alive(KubernetesHandle.of(run).driver_pid)) is Phase.LOST:
            return "the retry driver on the submitting machine is gone: no further attempt will start"
        return ""
    presence = controller_for(cluster, cluster.namespace)
    return "" if presence.answers else f"{presence.words}: no further attempt will start until one runs"


def _from_folder(run: RunRef, folder: RunFolder, inner: RunStatus) -> RunStatus:
    """The run's object is gone (cancelled): what this machine's driver recorded."""
    found = record(folder)
    if folder.phase(run.created_at, folder.runner_alive(KubernetesHandle.of(run).driver_pid)) is not Phase.ENDED:
        return inner
    from ...runs.state import Attempt

    attempts = [Attempt.model_validate(e) for e in found.get("attempts") or [] if isinstance(e, dict)]
    return inner.model_copy(update={"state": RunState(found["state"]), "reason": found.get("reason") or inner.reason,
                                    "exit_code": found.get("exit_code"), "attempts": attempts})  # fmt: skip


def stop_driver(run: RunRef) -> None:
    """`trainctl cancel`: this machine's driver, if any: the cancel file first (it starts no further attempt,
    records the run cancelled and deletes its objects), then SIGTERM."""
    folder = folder_of(run)
    if folder is None:
        return
    folder.request_cancel()
    pid = folder.runner_pid(KubernetesHandle.of(run).driver_pid)
    if pid is not None and folder.runner_alive(pid):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGTERM)

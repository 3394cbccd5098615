"""A job's state from the objects a cluster holds (the TrainJob or PyTorchJob, its pods, their events).
Pure: the engine reads the objects, tests feed them too.

A job that has not started says why, from what the cluster itself wrote: Kueue holding it (suspended,
waiting for admission or quota), the scheduler's "Unschedulable" message, a failing image pull, a container
the runtime cannot start (a command the image lacks), a ResourceQuota refusing the pods (FailedCreate events).
"""

from __future__ import annotations

import contextlib
from datetime import datetime
from typing import Any

from ...runs.image_ids import image_ids
from ...runs.progress import from_fields
from ...runs.state import Images, Progress, RunState, RunStatus
from .causes import start_failure
from .kinds import Kind

# PyTorchJob conditions (Training Operator v1) -> trainctl's states; the operator appends, one per type.
PYTORCHJOB_STATES = {
    "Created": RunState.QUEUED,
    "Suspended": RunState.QUEUED,
    "Running": RunState.RUNNING,
    "Restarting": RunState.RUNNING,
    "Succeeded": RunState.SUCCEEDED,
    "Failed": RunState.FAILED,
}
# TrainJob conditions (Trainer v2.3.0 trainjob_types.go): no Running condition; running is read from pods.
TRAINJOB_STATES = {"Suspended": RunState.QUEUED, "Complete": RunState.SUCCEEDED, "Failed": RunState.FAILED}
_IMAGE_PULL = ("ErrImagePull", "ImagePullBackOff", "InvalidImageName", "ErrImageNeverPull")


def current_condition(conditions: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The condition that describes the job now: the last one that is True (operators append), else the last."""
    true = [c for c in conditions if str(c.get("status")) == "True"]
    pool = true or conditions
    return pool[-1] if pool else None


def why_not_started(obj: dict[str, Any], pods: list[dict[str, Any]], events: list[dict[str, Any]]) -> str | None:
    """Why a job's pods are not running, from the cluster's own words; None when nothing says."""
    for pod in pods:
        st = pod.get("status") or {}
        for cs in (st.get("initContainerStatuses") or []) + (st.get("containerStatuses") or []):
            waiting = (cs.get("state") or {}).get("waiting") or {}
            if waiting.get("reason") in _IMAGE_PULL:
                image = cs.get("image") or ""
                return f"image pull failing ({waiting['reason']}) for {image}: {waiting.get('message', '')}".rstrip(
                    ": "
                )
            if waiting and (start := start_failure([pod])):  # restarted in place (OnFailure), it fails each time
                return f"the container cannot start on {start['node']} ({waiting.get('reason')}): {start['message']}"
        for cond in st.get("conditions") or []:
            if cond.get("type") == "PodScheduled" and str(cond.get("status")) == "False":
                return f"unschedulable: {cond.get('message') or cond.get('reason')}"
    for ev in sorted(events, key=lambda e: str(e.get("lastTimestamp") or e.get("eventTime") or "")):
        message = str(ev.get("message") or "")
        if ev.get("reason") == "FailedCreate" and "quota" in message:
            return f"quota: {message}"
    labels = (obj.get("metadata") or {}).get("labels") or {}
    queue = labels.get("kueue.x-k8s.io/queue-name")
    suspended = bool((obj.get("spec") or {}).get("suspend")) or bool(
        ((obj.get("spec") or {}).get("runPolicy") or {}).get("suspend")
    )
    if queue and suspended:
        kueue = [e for e in events if str(e.get("source", {}).get("component", "")).startswith("kueue")]
        kueue += [e for e in events if e.get("reason") in ("Pending", "QuotaReserved", "Admitted")]
        said = str(kueue[-1].get("message")) if kueue else "not admitted yet"
        return f"waiting for Kueue admission in LocalQueue {queue!r}: {said}"
    return None


def pod_image_ids(pods: list[dict[str, Any]], container: str) -> dict[str, str]:
    """{pod name: the image ID its kubelet reported for `container`} for the pods whose container the
    kubelet has started ("" where it reported none). The kubelet writes `status.containerStatuses[].imageID`
    from the runtime's CRI `ImageRef` (pkg/kubelet/kubelet_pods.go convertToAPIContainerStatuses:
    `ImageID: cs.ImageRef`); containerd's CRI gives the image's repo digest, or `sha256:<image id>` for an
    image that has none (internal/cri/server/container_status.go ContainerStatus)."""
    ids: dict[str, str] = {}
    for pod in pods:
        for cs in (pod.get("status") or {}).get("containerStatuses") or []:
            started = {"running", "terminated"} & set(cs.get("state") or {})
            if cs.get("name") == container and (started or cs.get("imageID")):
                ids[str(pod["metadata"]["name"])] = str(cs.get("imageID") or "")
    return ids


def trainer_progress(trainer_status: dict[str, Any] | None) -> Progress | None:
    """A TrainJob's `status.trainerStatus` (Kubeflow Trainer v2.3.0, `TrainJobStatus` gate;
    pkg/apis/trainer/v1alpha1/trainjob_types.go `TrainerStatus`) as progress: the trainer posts step,
    total_steps, epoch, loss and samples_per_s as its metrics (trainer/training/kubeflow_status.py), the ETA is
    estimatedRemainingSeconds. Another program's status without a `step` metric gives none."""
    if not trainer_status:
        return None
    fields: dict[str, Any] = {m.get("name"): m.get("value") for m in trainer_status.get("metrics") or []}
    fields["eta_s"] = trainer_status.get("estimatedRemainingSeconds")
    when = trainer_status.get("lastUpdatedTime")
    updated = None
    if isinstance(when, str):
        with contextlib.suppress(ValueError):
            updated = datetime.fromisoformat(when.replace("Z", "+00:00")).timestamp()
    return from_fields(fields, updated)


def job_status(
    kind: Kind,
    obj: dict[str, Any] | None,
    pods: dict[str, str],
    why: str | None = None,
    images: dict[str, str] | None = None,
) -> RunStatus:
    """RunStatus from the job object and its pods' phases (`why`: `why_not_started`'s answer; `images`:
    `pod_image_ids`' answer), with a TrainJob's `trainerStatus` as its progress."""
    found = _job_status(kind, obj, pods, why, images)
    progress = trainer_progress(((obj or {}).get("status") or {}).get("trainerStatus"))
    return found if progress is None else found.model_copy(update={"progress": progress})


def _job_status(
    kind: Kind, obj: dict[str, Any] | None, pods: dict[str, str], why: str | None, images: dict[str, str] | None
) -> RunStatus:
    if obj is None:
        return RunStatus(
            state=RunState.UNKNOWN,
            native_state="NotFound",
            reason=f"the {kind.kind} does not exist (deleted, or removed after its TTL)",
        )
    st = obj.get("status") or {}
    conditions = list(st.get("conditions") or [])
    cond = current_condition(conditions)
    details: dict[str, Any] = {
        "conditions": [
            {k: c.get(k) for k in ("type", "status", "reason", "message", "lastTransitionTime") if c.get(k) is not None}
            for c in conditions
        ],
        "pods": pods,
    }
    seen = image_ids(images or {}, "pod")
    for key in ("replicaStatuses", "jobsStatus"):
        if st.get(key):
            details[key] = st[key]
    states = TRAINJOB_STATES if kind.api == "trainjob" else PYTORCHJOB_STATES
    running = any(p == "Running" for p in pods.values())
    if cond is not None and str(cond.get("status")) == "True" and cond.get("type") in states:
        state = states[str(cond["type"])]
        text = ": ".join(str(cond[k]) for k in ("reason", "message") if cond.get(k))
        if state is RunState.QUEUED and why:
            text = f"{text} ({why})" if text else why
        if not state.finished and running and kind.api == "trainjob":
            return _status(RunState.RUNNING, "Running", _running(why), details, seen)
        return _status(state, str(cond["type"]), text, details, seen)
    if running:
        return _status(RunState.RUNNING, "Running", _running(why), details, seen)
    if cond is not None:  # a PyTorchJob condition we do not map, or one that is not True
        text = ": ".join(str(cond[k]) for k in ("reason", "message") if cond.get(k))
        return _status(RunState.UNKNOWN, str(cond.get("type")), text, details, seen)
    if why:
        return _status(RunState.QUEUED, "Pending", why, details, seen)
    operator = "Kubeflow Trainer" if kind.api == "trainjob" else "training operator"
    reason = f"no conditions yet: the {operator} has not picked the job up"
    if pods:
        reason = "pods exist but have not started yet"
    return _status(RunState.QUEUED, "Pending", reason, details, seen)


def _running(why: str | None) -> str:
    """Pods run; where another still waits (a retry's pod with no node left), the cluster's words for it."""
    return f"pods running; another waits: {why}" if why else "pods running"


def _status(state: RunState, native: str, reason: str, details: dict[str, Any], images: Images | None) -> RunStatus:
    return RunStatus(state=state, native_state=native, reason=reason, images=images, details=details)

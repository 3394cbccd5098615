"""The only code that talks to a Kubernetes API server (the official `kubernetes` client, imported here only)."""

from __future__ import annotations

import json
import queue
import threading
import time
from collections.abc import Iterator
from typing import Any

from ...errors import EngineError
from ...run_state import RunRef, RunState, RunStatus
from ...spec import JobSpec
from .cluster import RESOURCE, TIMEOUT, Cluster, connect
from .render import (
    CONTAINER,
    GROUP,
    OP_JOB_NAME,
    OP_REPLICA_INDEX,
    OP_REPLICA_TYPE,
    PLURAL,
    VERSION,
    build_manifest,
)

FIELD_MANAGER = "trainctl"
# The operator's condition types -> trainctl's states.
CONDITION_STATES = {
    "Created": RunState.QUEUED,
    "Suspended": RunState.QUEUED,
    "Running": RunState.RUNNING,
    "Restarting": RunState.RUNNING,
    "Succeeded": RunState.SUCCEEDED,
    "Failed": RunState.FAILED,
}


def _cluster_for(run: RunRef) -> tuple[Cluster, str]:
    namespace, sep, name = run.native_id.partition("/")
    if not sep or not name:
        raise EngineError(f"{run.id}: expected kubernetes:<namespace>/<name>")
    return connect(run.meta.get("context"), namespace, run.meta.get("kubeconfig")), name


def _meta(obj: dict[str, Any]) -> dict[str, Any]:
    return obj.get("metadata") or {}


def apply_manifest(
    cluster: Cluster, manifest: dict[str, Any], *, dry_run: bool = False, force: bool = False
) -> tuple[dict[str, Any], str]:
    """Server-side apply; returns the object and what happened: created, unchanged or updated.

    A changed spec on a job the operator has already started is refused: the operator does not roll running
    pods, so an "update" would silently do nothing.
    """
    api = cluster.custom()
    name = _meta(manifest)["name"]
    ns = cluster.namespace
    manifest = {**manifest, "metadata": {**_meta(manifest), "namespace": ns}}
    before = get_job(cluster, name)

    def ssa(dry: bool) -> dict[str, Any]:
        # Raw response: the generated client maps only 200 to a body type and returns None for 201 Created.
        resp = cluster.call(
            api.patch_namespaced_custom_object, GROUP, VERSION, ns, PLURAL, name, manifest,
            field_manager=FIELD_MANAGER, force=force, dry_run="All" if dry else None,
            _content_type="application/apply-patch+yaml", _request_timeout=TIMEOUT, _preload_content=False,
            verb="patch", resource=RESOURCE, name=name,
        )  # fmt: skip
        result: dict[str, Any] = json.loads(resp.data)
        return result

    if before is None:
        return ssa(dry_run), "created"
    preview = ssa(True)
    changed = _meta(preview).get("generation") != _meta(before).get("generation") or any(
        _meta(preview).get(k) != _meta(before).get(k) for k in ("labels", "annotations")
    )
    started = bool((before.get("status") or {}).get("conditions"))
    if changed and started:
        raise EngineError(
            f"PyTorchJob {ns}/{name} already exists with a different spec, and the operator has started it "
            "(it does not roll running pods, so an update would do nothing)",
            hint=f"delete it first (`trainctl k8s delete {name} -n {ns}`) or give the changed job another name",
        )
    if dry_run:
        return preview, "updated" if changed else "unchanged"
    return ssa(False), "updated" if changed else "unchanged"


def get_job(cluster: Cluster, name: str) -> dict[str, Any] | None:
    """The PyTorchJob, or None when it does not exist (a missing CRD is an error, not None)."""
    from kubernetes.client.exceptions import ApiException

    api = cluster.custom()

    def get() -> dict[str, Any] | None:
        try:
            obj: dict[str, Any] = api.get_namespaced_custom_object(
                GROUP, VERSION, cluster.namespace, PLURAL, name, _request_timeout=TIMEOUT
            )
            return obj
        except ApiException as exc:
            if exc.status == 404 and cluster.crd_installed() is not False:
                return None
            raise

    return cluster.call(get, verb="get", resource=RESOURCE, name=name)


def submit(
    job: JobSpec,
    *,
    context: str | None = None,
    namespace: str | None = None,
    kubeconfig: str | None = None,
    dry_run: bool = False,
    force: bool = False,
) -> RunRef:
    """Apply the job's PyTorchJob. `context`/`namespace` override the job's kubernetes section."""
    sec = job.section("kubernetes")
    updates = {k: v for k, v in {"context": context, "namespace": namespace}.items() if v is not None}
    if updates:
        job = job.model_copy(update={"kubernetes": sec.model_copy(update=updates)})
        sec = job.section("kubernetes")
    ns: str = getattr(sec, "namespace")  # noqa: B009 - typed as Section
    ctx: str | None = getattr(sec, "context")  # noqa: B009
    manifest = build_manifest(job)
    cluster = connect(ctx, ns, kubeconfig)
    obj, outcome = apply_manifest(cluster, manifest, dry_run=dry_run, force=force)
    meta = {"namespace": ns, "context": ctx, "apply": outcome, "uid": _meta(obj).get("uid"), "dry_run": dry_run}
    if kubeconfig:
        meta["kubeconfig"] = kubeconfig
    return RunRef(target="kubernetes", native_id=f"{ns}/{job.name}", job_name=job.name, meta=meta)


# ---- status ----


def current_condition(conditions: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The condition that describes the job now: the last one that is True (the operator appends), else the last."""
    true = [c for c in conditions if str(c.get("status")) == "True"]
    pool = true or conditions
    return pool[-1] if pool else None


def job_status(obj: dict[str, Any] | None, pods: dict[str, str]) -> RunStatus:
    """RunStatus from a PyTorchJob object and its pods' phases (pure: tests feed it objects too)."""
    if obj is None:
        return RunStatus(
            RunState.UNKNOWN, "NotFound", "the PyTorchJob does not exist (deleted, or removed after its TTL)"
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
    if st.get("replicaStatuses"):
        details["replicaStatuses"] = st["replicaStatuses"]
    if cond is None:
        reason = "no conditions yet: the training operator has not picked the job up"
        if pods:
            reason = "pods exist but the operator has written no condition yet"
        state = RunState.RUNNING if any(p == "Running" for p in pods.values()) else RunState.QUEUED
        return RunStatus(state, "Pending", reason, details)
    ctype = str(cond.get("type"))
    state = CONDITION_STATES.get(ctype, RunState.UNKNOWN) if str(cond.get("status")) == "True" else RunState.UNKNOWN
    text = ": ".join(str(cond[k]) for k in ("reason", "message") if cond.get(k))
    return RunStatus(state, ctype, text, details)


def _pods(cluster: Cluster, name: str) -> list[tuple[int, str, Any]]:
    """The job's pods as (rank, "Master-0"/"Worker-1", pod), ranked Master first, then Workers by index."""
    core = cluster.core()
    found = cluster.call(
        core.list_namespaced_pod, cluster.namespace, label_selector=f"{OP_JOB_NAME}={name}",
        _request_timeout=TIMEOUT, verb="list", resource="pods",
    )  # fmt: skip
    keyed = []
    for pod in found.items:
        labels = pod.metadata.labels or {}
        rtype = str(labels.get(OP_REPLICA_TYPE, "worker")).capitalize()
        try:
            index = int(labels.get(OP_REPLICA_INDEX, "0"))
        except ValueError:
            index = 0
        keyed.append(((0 if rtype == "Master" else 1, index, pod.metadata.name), f"{rtype}-{index}", pod))
    keyed.sort(key=lambda item: item[0])
    return [(rank, label, pod) for rank, (_, label, pod) in enumerate(keyed)]


def status(run: RunRef) -> RunStatus:
    cluster, name = _cluster_for(run)
    obj = get_job(cluster, name)
    pods = (
        {label: str(pod.status.phase if pod.status else "Unknown") for _, label, pod in _pods(cluster, name)}
        if obj
        else {}
    )
    return job_status(obj, pods)


def list_jobs(cluster: Cluster) -> list[dict[str, Any]]:
    """Every PyTorchJob in the namespace with its state, newest last."""
    api = cluster.custom()
    found = cluster.call(
        api.list_namespaced_custom_object, GROUP, VERSION, cluster.namespace, PLURAL,
        _request_timeout=TIMEOUT, verb="list", resource=RESOURCE,
    )  # fmt: skip
    rows = []
    for obj in found.get("items", []):
        st = job_status(obj, {})
        meta = _meta(obj)
        rows.append(
            {
                "name": meta.get("name"),
                "namespace": meta.get("namespace"),
                "state": st.state.value,
                "condition": st.native_state,
                "created": meta.get("creationTimestamp"),
                "managed_by_trainctl": (meta.get("labels") or {}).get("app.kubernetes.io/managed-by") == "trainctl",
            }
        )
    return sorted(rows, key=lambda r: (str(r["created"]), str(r["name"])))


# ---- logs ----


def _stream_pod(cluster: Cluster, pod: str, prefix: str, follow: bool, out: queue.Queue[tuple[str, Any]]) -> None:
    """Put the pod's log lines (prefixed) on `out`, then a ("done", None) marker; errors travel as ("error", exc)."""
    core = cluster.core()
    try:
        resp = cluster.call(
            core.read_namespaced_pod_log, pod, cluster.namespace, container=CONTAINER, follow=follow,
            _preload_content=False, _request_timeout=None if follow else TIMEOUT, verb="get", resource="pods/log",
            name=pod,
        )  # fmt: skip
        buffer = b""
        try:
            for chunk in resp.stream(4096, decode_content=True):
                buffer += chunk
                *lines, buffer = buffer.split(b"\n")
                for line in lines:
                    out.put(("line", prefix + line.decode("utf-8", "replace")))
        finally:
            resp.release_conn()
        if buffer:
            out.put(("line", prefix + buffer.decode("utf-8", "replace")))
    except BaseException as exc:
        out.put(("error", exc))
    finally:
        out.put(("done", None))


def logs(
    run: RunRef, follow: bool = False, rank: int | None = None, wait_s: float = 300.0, poll: float = 1.0
) -> Iterator[str]:
    """Log lines of every pod (or one rank), each prefixed `[rank N] `; with follow, until the pods end.

    Following a job whose pods do not exist yet waits up to `wait_s` for the operator to create them.
    """
    cluster, name = _cluster_for(run)
    deadline = time.monotonic() + wait_s
    while True:
        if get_job(cluster, name) is None:
            raise EngineError(f"PyTorchJob {cluster.namespace}/{name} does not exist")
        pods = _pods(cluster, name)
        if rank is not None:
            pods = [p for p in pods if p[0] == rank]
        if pods or not follow or time.monotonic() >= deadline:
            break
        if job_status(get_job(cluster, name), {}).state.finished:
            break
        time.sleep(poll)
    if not pods:
        which = f"rank {rank}" if rank is not None else "any rank"
        raise EngineError(
            f"no pods for {which} of PyTorchJob {cluster.namespace}/{name} yet (pods carry the label {OP_JOB_NAME}={name})"
        )
    out: queue.Queue[tuple[str, Any]] = queue.Queue()
    threads = [
        threading.Thread(
            target=_stream_pod, args=(cluster, pod.metadata.name, f"[rank {r}] ", follow, out), daemon=True
        )
        for r, _, pod in pods
    ]
    if not follow:  # whole logs, one pod after another, in rank order
        for thread in threads:
            thread.start()
            thread.join()
    else:
        for thread in threads:
            thread.start()
    done = 0
    while done < len(threads):
        kind, item = out.get()
        if kind == "line":
            yield item
        elif kind == "error":
            raise item
        else:
            done += 1


# ---- cancel ----


def delete_job(cluster: Cluster, name: str) -> None:
    api = cluster.custom()
    cluster.call(
        api.delete_namespaced_custom_object, GROUP, VERSION, cluster.namespace, PLURAL, name,
        propagation_policy="Background", _request_timeout=TIMEOUT, verb="delete", resource=RESOURCE, name=name,
    )  # fmt: skip


def cancel(run: RunRef) -> None:
    cluster, name = _cluster_for(run)
    delete_job(cluster, name)

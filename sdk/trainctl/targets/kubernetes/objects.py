"""Finding a run's objects on its cluster: the TrainJob or PyTorchJob, and its pods in rank order."""

from __future__ import annotations

from typing import Any

from ...errors import EngineError
from ...runs.state import RunRef
from .attempts import current_object
from .cluster import TIMEOUT, Cluster, connect
from .handle import KubernetesHandle
from .kinds import KINDS, TRAINJOB, Kind


def cluster_for(run: RunRef) -> tuple[Cluster, str]:
    """The run's cluster (its context and kubeconfig, its namespace) and its object's name: with trainctl's
    own retries, the current attempt's, which the run's object records (attempts.py)."""
    cluster, name = run_cluster(run)
    try:
        _, root = find_job(cluster, name, KubernetesHandle.of(run).api)
    except EngineError:
        return cluster, name
    return cluster, current_object(root, name)


def run_cluster(run: RunRef) -> tuple[Cluster, str]:
    """The run's cluster and the name of the run's own object (attempt 1)."""
    namespace, sep, name = run.native_id.partition("/")
    if not sep or not name:
        raise EngineError(f"{run.id}: expected kubernetes:<namespace>/<name>")
    handle = KubernetesHandle.of(run)
    return connect(handle.context, namespace, handle.kubeconfig), name


def meta_of(obj: dict[str, Any]) -> dict[str, Any]:
    return obj.get("metadata") or {}


def get_job(cluster: Cluster, name: str, kind: Kind = TRAINJOB) -> dict[str, Any] | None:
    """The job object, or None when it does not exist (a missing CRD is an error, not None)."""
    from kubernetes.client.exceptions import ApiException

    api = cluster.custom()

    def get() -> dict[str, Any] | None:
        try:
            obj: dict[str, Any] = api.get_namespaced_custom_object(
                kind.group, kind.version, cluster.namespace, kind.plural, name, _request_timeout=TIMEOUT
            )
            return obj
        except ApiException as exc:
            if exc.status == 404 and cluster.crd_installed(kind.resource) is not False:
                return None
            raise

    return cluster.call(get, verb="get", resource=kind.resource, name=name)


def find_job(cluster: Cluster, name: str, api: str | None) -> tuple[Kind, dict[str, Any] | None]:
    """The job by its recorded kind, or (a bare `trainctl k8s status NAME`) whichever kind has it: a
    TrainJob first, then a PyTorchJob; kinds whose CRD the cluster lacks are skipped."""
    if api in KINDS:
        return KINDS[api], get_job(cluster, name, KINDS[api])
    installed = [k for k in KINDS.values() if cluster.crd_installed(k.resource) is not False]
    if not installed:  # neither CRD: say so (get_job raises the 404 naming the TrainJob CRD)
        return TRAINJOB, get_job(cluster, name, TRAINJOB)
    for kind in installed:
        obj = get_job(cluster, name, kind)
        if obj is not None:
            return kind, obj
    return installed[0], None


def list_pods(cluster: Cluster, selector: str) -> tuple[list[dict[str, Any]], str]:
    """The namespace's pods that match `selector`, as the API server sent them (its JSON: Cluster.get), and
    the list's resourceVersion, from which a watch goes on."""
    import json

    resp = cluster.get(f"/api/v1/namespaces/{cluster.namespace}/pods", [("labelSelector", selector)],
                       verb="list", resource="pods")  # fmt: skip
    body = json.loads(resp.data)
    return list(body.get("items") or []), str((body.get("metadata") or {}).get("resourceVersion") or "")


def pods_of(cluster: Cluster, kind: Kind, name: str) -> list[tuple[int, str, dict[str, Any]]]:
    """The job's pods as (rank, "node-0"/"Master-0"/"Worker-1", pod), in rank order."""
    keyed = []
    for pod in list_pods(cluster, kind.selector(name))[0]:
        meta = pod.get("metadata") or {}
        order, index, label = kind.pod_key(meta.get("labels") or {}, meta.get("annotations") or {})
        keyed.append(((order, index, str(meta.get("name"))), label, pod))
    keyed.sort(key=lambda item: item[0])
    return [(rank, label, pod) for rank, (_, label, pod) in enumerate(keyed)]


def pod_events(
    cluster: Cluster, kind: Kind, name: str, version: str | None, seconds: int
) -> tuple[list[dict[str, Any]], str | None]:
    """The job's pods as they changed since `version` (None: as they are now, listed), watched for up to
    `seconds`; (every state seen, oldest first; the version to go on from, None when the server says the
    old one is gone: list again). A watch misses no state between two calls, even of a pod deleted since."""
    from kubernetes import watch

    core = cluster.core()
    selector = kind.selector(name)
    if version is None:
        return list_pods(cluster, selector)
    seen: list[dict[str, Any]] = []

    def stream() -> str | None:
        last: str | None = version
        for event in watch.Watch().stream(
            core.list_namespaced_pod, cluster.namespace, label_selector=selector, resource_version=version,
            timeout_seconds=seconds, _request_timeout=seconds + TIMEOUT,
        ):  # fmt: skip
            raw = event.get("raw_object") or {}
            if event.get("type") == "ERROR":  # 410 Gone: the version expired
                return None
            seen.append(raw)
            last = str((raw.get("metadata") or {}).get("resourceVersion") or last)
        return last

    return seen, cluster.call(stream, verb="watch", resource="pods")

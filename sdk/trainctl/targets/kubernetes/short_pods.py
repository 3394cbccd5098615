"""A short-lived helper pod's life, from outside the cluster (I/O): create it, wait for it to end, read its log,
delete it. Two helpers use it: `trainctl k8s cp-data` (cp_data.py) and `trainctl pull` (output_pull.py); each
does without pods/exec (what `kubectl cp` needs), so needs only create, get, delete and pods/log."""

from __future__ import annotations

import time
from typing import Any

from ...errors import EngineError
from .cluster import TIMEOUT, Cluster

STUCK = frozenset({"ImagePullBackOff", "ErrImageNeverPull", "InvalidImageName", "CreateContainerConfigError"})
"""A container's waiting reasons (the kubelet's) that waiting does not end: the image is not there to pull, or the
pod's own spec is wrong. A pod that shows one is given up at once rather than after the whole timeout."""


def create(cluster: Cluster, pod: dict[str, Any]) -> None:
    name = pod["metadata"]["name"]
    cluster.call(
        cluster.core().create_namespaced_pod, cluster.namespace, pod, _request_timeout=TIMEOUT,
        verb="create", resource="pods", name=name,
    )  # fmt: skip


def wait_ended(cluster: Cluster, name: str, timeout: float, what: str) -> str:
    """The pod's final phase (Succeeded or Failed); EngineError naming `what` (the copy pod) and why it waits: at
    once for a reason in STUCK, else after `timeout` seconds (a claim that cannot be mounted, no node fits)."""
    deadline = time.monotonic() + timeout
    while True:
        pod = cluster.call(
            cluster.core().read_namespaced_pod, name, cluster.namespace, _request_timeout=TIMEOUT,
            verb="get", resource="pods", name=name,
        )  # fmt: skip
        phase = str(pod.status.phase if pod.status and pod.status.phase else "Pending")
        if phase in ("Succeeded", "Failed"):
            return phase
        waits = [
            (s.state.waiting.reason or "", f"{s.name}: {s.state.waiting.reason}", s.state.waiting.message or "")
            for s in (pod.status.container_statuses or [] if pod.status else [])
            if s.state and s.state.waiting
        ]
        stuck = [f"{said} ({message})" if message else said for reason, said, message in waits if reason in STUCK]
        if stuck:
            raise EngineError(
                f"{what} {name} cannot start: {'; '.join(stuck)}",
                hint=f"kubectl -n {cluster.namespace} describe pod {name}",
            )
        if time.monotonic() > deadline:
            waiting = [said for _, said, _ in waits]
            raise EngineError(
                f"{what} {name} is still {phase} after {timeout:.0f}s"
                + (f" ({'; '.join(waiting)})" if waiting else ""),
                hint=f"kubectl -n {cluster.namespace} describe pod {name}",
            )
        time.sleep(1.0)


def log_lines(cluster: Cluster, name: str) -> list[str]:
    """The pod's whole log through the API server (GET .../pods/{name}/log); EngineError if it cannot be read."""
    text = cluster.call(
        cluster.core().read_namespaced_pod_log, name, cluster.namespace, _request_timeout=TIMEOUT * 4,
        verb="get", resource="pods/log", name=name,
    )  # fmt: skip
    return str(text).splitlines()


def delete(cluster: Cluster, name: str) -> None:
    """Delete the pod now (grace period 0: it has ended or must not go on); a missing one is fine."""
    try:
        cluster.core().delete_namespaced_pod(
            name=name, namespace=cluster.namespace, grace_period_seconds=0, _request_timeout=TIMEOUT
        )
    except Exception:  # best effort: the helper's own outcome is what is reported
        return

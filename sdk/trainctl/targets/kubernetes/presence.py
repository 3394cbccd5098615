"""Whether trainctl's controller answers for a namespace: its lock, renewed within its lease, watching it.

The lock is the ConfigMap `trainctl-controller` in the controller's namespace (controller.py; `trainctl`
as k8s/ installs it, else TRAINCTL_CONTROLLER_NAMESPACE). Each renewal writes its time in epoch seconds into
the ConfigMap's data (`renewed`): the leader's record, which the official client writes, has local times
without a zone. So this compares two machines' clocks, allowing SLACK_S for their skew.
"""

from __future__ import annotations

import contextlib
import json
import os
import time
from dataclasses import dataclass

from ...errors import EngineError
from .cluster import TIMEOUT, Cluster

LOCK_NAME = "trainctl-controller"
WATCH_KEY = "watch"
RENEWED_KEY = "renewed"
LEADER_ANNOTATION = "control-plane.alpha.kubernetes.io/leader"  # kubernetes.leaderelection ConfigMapLock
SLACK_S = 5.0
"""Seconds past its lease a renewal may come late (clock skew, a slow API server) and still count."""


def default_namespace() -> str:
    """Where the controller's lock is looked for: `trainctl` (k8s/), or TRAINCTL_CONTROLLER_NAMESPACE."""
    return os.environ.get("TRAINCTL_CONTROLLER_NAMESPACE") or "trainctl"


@dataclass(frozen=True)
class Presence:
    answers: bool
    words: str


def controller_for(cluster: Cluster, namespace: str, lock_namespace: str | None = None) -> Presence:
    """Whether a controller leads and watches `namespace`, and in words why not."""
    where = lock_namespace or default_namespace()
    cluster = Cluster(cluster.api, cluster.context, where, cluster.kubeconfig)
    try:
        found = cluster.call(cluster.core().read_namespaced_config_map, LOCK_NAME, where, _request_timeout=TIMEOUT,
                             verb="get", resource="configmaps", name=LOCK_NAME)  # fmt: skip
    except EngineError as exc:
        if "Not Found" in str(exc):
            return Presence(False, f"no trainctl controller runs (no lock {where}/{LOCK_NAME})")
        return Presence(False, f"cannot tell whether a trainctl controller runs ({str(exc).splitlines()[0]})")
    meta = found.metadata
    record: dict[str, object] = {}
    with contextlib.suppress(ValueError, TypeError):
        record = json.loads((meta.annotations or {}).get(LEADER_ANNOTATION) or "{}")
    lease = float(str(record.get("leaseDurationSeconds") or 15))
    data = found.data or {}
    holder = record.get("holderIdentity") or "nobody"
    try:
        age = time.time() - float(data[RENEWED_KEY])
    except (KeyError, ValueError):
        return Presence(False, f"the lock {where}/{LOCK_NAME} has no renewal time: no trainctl controller wrote it")
    if age > lease + SLACK_S:
        return Presence(False, f"the trainctl controller's lock ({where}/{LOCK_NAME}, held by {holder}) was last "
                               f"renewed {age:.0f}s ago: no controller answers")  # fmt: skip
    watched = str(data.get(WATCH_KEY) or "*")
    if watched != "*" and namespace not in watched.split(","):
        return Presence(False, f"the trainctl controller ({holder}) watches {watched}, not {namespace}")
    return Presence(True, f"the trainctl controller ({holder} in {where}) drives it")

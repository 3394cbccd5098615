"""One step of a retried Kubernetes run, from what the cluster holds: the same steps for the in-cluster
controller (controller.py) and the submitting machine's driver (driver.py). attempts.py says where the
run's state lives and why every write is safe to repeat.

A failed JobSet deletes its pods at once, and the failing container's terminated state (its exit code, its
termination message) is only seen on the way; so `PodMemory` watches trainctl's pods and keeps the last
state of each, deleted ones included, and an attempt is classified from that (causes.attempt_of).
"""

from __future__ import annotations

import contextlib
import re
import threading
import time
from collections.abc import Callable
from datetime import datetime, timezone
from typing import Any

from ...errors import EngineError
from .attempts import (
    ATTEMPT_OF_LABEL,
    Record,
    attempt_name,
    cancelled,
    decide,
    next_attempt,
    record_of,
    record_patch,
)
from .causes import attempt_of, avoided
from .cluster import TIMEOUT, Cluster
from .kinds import Kind
from .objects import get_job, meta_of
from .pod import MANAGED_BY
from .status import job_status

RESUMED = re.compile(r"resumed from \S+ at step (\d+)")
"""The trainer's line when it resumes (trainer/checkpoint/checkpointer.py): the step this attempt resumed from."""
LOG_EVERY_S = 5.0
KEEP_DELETED_S = 600.0
"""How long a deleted pod's last state is kept: long enough for its attempt's end to be read, then dropped
(a controller runs for months; the pods of runs it never drives would pile up)."""
Log = Callable[[str], None]


class PodMemory:
    """The last state of every trainctl pod in one namespace (None: all), deleted ones included: a list,
    then a watch from its version, listed again whenever the watch breaks (the API server away, 410 Gone)."""

    def __init__(self, cluster: Cluster, namespace: str | None, log: Log) -> None:
        self.cluster, self.namespace, self.log = cluster, namespace, log
        self._pods: dict[tuple[str, str], dict[str, Any]] = {}
        self._deleted: dict[tuple[str, str], float] = {}
        self._lock = threading.Lock()
        self.listed = threading.Event()
        self.stopped = threading.Event()

    def start(self) -> PodMemory:
        threading.Thread(target=self._run, name="trainctl-pod-memory", daemon=True).start()
        return self

    def pods(self, namespace: str, kind: Kind, name: str) -> list[dict[str, Any]]:
        """The pods of the object `name` (by the kind's pod label), as last seen."""
        with self._lock:
            return [p for (ns, _), p in self._pods.items()
                    if ns == namespace and (meta_of(p).get("labels") or {}).get(kind.pod_label) == name]  # fmt: skip

    def forget(self, namespace: str, kind: Kind, name: str) -> None:
        with self._lock:
            for key in [k for k, p in self._pods.items() if k[0] == namespace and
                        (meta_of(p).get("labels") or {}).get(kind.pod_label) == name]:  # fmt: skip
                del self._pods[key]

    def _keep(self, pod: dict[str, Any], deleted: bool = False) -> None:
        meta, now = meta_of(pod), time.monotonic()
        key = (str(meta.get("namespace")), str(meta.get("name")))
        with self._lock:
            self._pods[key] = pod
            if deleted:
                self._deleted[key] = now
            for old in [k for k, at in self._deleted.items() if now - at > KEEP_DELETED_S]:
                self._pods.pop(old, None)
                del self._deleted[old]

    def _lister(self) -> tuple[Callable[..., Any], tuple[Any, ...]]:
        core = self.cluster.core()
        if self.namespace is None:
            return core.list_pod_for_all_namespaces, ()
        return core.list_namespaced_pod, (self.namespace,)

    def relist(self) -> str:
        fn, args = self._lister()
        selector = ",".join(f"{k}={v}" for k, v in MANAGED_BY.items())
        found = self.cluster.call(fn, *args, label_selector=selector, _request_timeout=TIMEOUT, verb="list",
                                  resource="pods")  # fmt: skip
        for pod in found.items:
            self._keep(self.cluster.api.sanitize_for_serialization(pod))
        self.listed.set()
        return str(found.metadata.resource_version)

    def _run(self) -> None:
        from kubernetes import watch

        selector = ",".join(f"{k}={v}" for k, v in MANAGED_BY.items())
        while not self.stopped.is_set():
            try:
                version = self.relist()
                fn, args = self._lister()
                for event in watch.Watch().stream(fn, *args, label_selector=selector, resource_version=version,
                                                  timeout_seconds=60, _request_timeout=60 + TIMEOUT):  # fmt: skip
                    if event.get("type") == "ERROR" or self.stopped.is_set():
                        break
                    self._keep(event.get("raw_object") or {}, deleted=event.get("type") == "DELETED")
            except Exception as exc:  # the API server away: list again once it answers
                self.log(f"watching pods: {exc!r}")
                time.sleep(2.0)


def _seconds(stamp: Any) -> float | None:
    with contextlib.suppress(TypeError, ValueError):
        return datetime.fromisoformat(str(stamp).replace("Z", "+00:00")).timestamp()
    return None


def _created(obj: dict[str, Any]) -> float | None:
    return _seconds(meta_of(obj).get("creationTimestamp"))


def _ended(obj: dict[str, Any]) -> float:
    """When the object's last condition changed (its end, by the API server's clock, as its creation is)."""
    times = [_seconds(c.get("lastTransitionTime")) for c in (obj.get("status") or {}).get("conditions") or []]
    return max((t for t in times if t is not None), default=time.time())


def resumed_step(cluster: Cluster, kind: Kind, pods: list[dict[str, Any]]) -> int | None:
    """The step the rank-0 pod said it resumed from (the head of its log), or None (not yet, or fresh)."""
    first = sorted(
        pods, key=lambda p: kind.pod_key(meta_of(p).get("labels") or {}, meta_of(p).get("annotations") or {})
    )
    if not first:
        return None
    try:
        text = cluster.call(
            cluster.core().read_namespaced_pod_log, meta_of(first[0])["name"], meta_of(first[0])["namespace"],
            container=kind.container, limit_bytes=1_000_000, _request_timeout=TIMEOUT, verb="get", resource="pods/log",
        )  # fmt: skip
    except EngineError:
        return None
    found = RESUMED.search(str(text))
    return int(found.group(1)) if found else None


class Runs:
    """The driver's memory across steps: what each attempt's pods said while they ran (its resumed step)."""

    def __init__(self, cluster: Cluster, pods: PodMemory | None, log: Log) -> None:
        self.cluster, self.pods, self.log = cluster, pods, log
        self.resumed: dict[tuple[str, str], int | None] = {}
        self._next_look: dict[tuple[str, str], float] = {}

    def on(self, namespace: str) -> Cluster:
        """The cluster's client, aimed at `namespace`."""
        return Cluster(self.cluster.api, self.cluster.context, namespace, self.cluster.kubeconfig)

    def step(self, kind: Kind, run: dict[str, Any]) -> dict[str, Any] | None:
        """Advance the run whose object is `run` by what the cluster shows now; its outcome once it ended."""
        assert self.pods is not None, "a driver that steps runs remembers their pods"
        record = record_of(run)
        if record.outcome is not None:
            return record.outcome
        ns, root = str(meta_of(run)["namespace"]), str(meta_of(run)["name"])
        cluster, number = self.on(ns), len(record.ended) + 1
        name = attempt_name(root, number)
        obj = run if number == 1 else get_job(cluster, name, kind)
        if obj is None:  # decided, but the object is not there yet (a driver stopped in between): make it
            self._create(cluster, kind, run, record, number)
            return None
        state = job_status(kind, obj, {}).state
        key = (ns, name)
        if not state.finished:
            if self.resumed.get(key) is None and time.monotonic() >= self._next_look.get(key, 0.0):
                self.resumed[key] = resumed_step(cluster, kind, self.pods.pods(ns, kind, name))
                self._next_look[key] = time.monotonic() + LOG_EVERY_S
            return None
        time.sleep(1.0)  # the pods' last states, which the watch may deliver just after the object's end
        self.pods.relist()
        pods = self.pods.pods(ns, kind, name)
        attempt = attempt_of(number, f"{ns}/{name}", pods, None, _created(obj), _ended(obj))
        resumed = self.resumed.pop(key, None)
        self._next_look.pop(key, None)
        if resumed is None:
            resumed = resumed_step(cluster, kind, pods)
        decision = decide(record, attempt.model_copy(update={"resumed_from_step": resumed}), state.value,
                          f"{kind.kind} {name}")  # fmt: skip
        if not self._record(cluster, kind, run, [*record.ended, decision.attempt], decision.outcome):
            return None  # someone else recorded it first: read again
        self.log(f"{ns}/{root} {name}: {decision.said}")
        event(cluster, run, "AttemptEnded", f"{name}: {decision.said}")
        self.pods.forget(ns, kind, name)
        if decision.retry:
            record.ended.append(decision.attempt)
            self._create(cluster, kind, run, record, number + 1)
        return decision.outcome

    def cancel(self, kind: Kind, run: dict[str, Any]) -> dict[str, Any]:
        """Stop the run: its current attempt recorded cancelled (when the object is still there), its objects
        deleted (attempts, then the run's own)."""
        record = record_of(run)
        ns, root = str(meta_of(run)["namespace"]), str(meta_of(run)["name"])
        cluster, number = self.on(ns), record.current
        name = attempt_name(root, number)
        decision = cancelled(record, number, f"{ns}/{name}", None, time.time())
        if record.outcome is None:
            with contextlib.suppress(EngineError):
                self._record(cluster, kind, run, [*record.ended, decision.attempt], decision.outcome)
        delete_attempts(cluster, kind, root)
        with contextlib.suppress(EngineError):
            delete(cluster, kind, root)
        return decision.outcome or {}

    def _record(self, cluster: Cluster, kind: Kind, run: dict[str, Any], ended: list[Any],
                outcome: dict[str, Any] | None) -> bool:  # fmt: skip
        name = meta_of(run)["name"]
        try:
            cluster.call(
                cluster.custom().patch_namespaced_custom_object, kind.group, kind.version, cluster.namespace,
                kind.plural, name, record_patch(run, ended, outcome), _request_timeout=TIMEOUT, verb="patch",
                resource=kind.resource, name=name,
            )  # fmt: skip
        except EngineError as exc:
            if "Conflict" in str(exc) or "409" in str(exc) or "modified" in str(exc):
                return False
            raise
        return True

    def _create(self, cluster: Cluster, kind: Kind, run: dict[str, Any], record: Record, number: int) -> None:
        avoid = avoided(record.ended)
        body = next_attempt(run, number, avoid)
        try:
            cluster.call(
                cluster.custom().create_namespaced_custom_object, kind.group, kind.version, cluster.namespace,
                kind.plural, body, _request_timeout=TIMEOUT, verb="create", resource=kind.resource,
            )  # fmt: skip
        except EngineError as exc:
            if "AlreadyExists" not in str(exc) and "already exists" not in str(exc):
                raise
            return
        said = f"started attempt {number} as {body['metadata']['name']}, avoiding {', '.join(avoid) or 'no node'}"
        self.log(f"{cluster.namespace}/{meta_of(run)['name']}: {said}")
        event(cluster, run, "AttemptStarted", said)


def event(cluster: Cluster, run: dict[str, Any], reason: str, message: str) -> None:
    """What the driver decided, as an Event on the run's object (`kubectl describe` shows it); best effort."""
    meta = meta_of(run)
    stamp = datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    body = {"metadata": {"generateName": f"{meta['name']}.", "namespace": cluster.namespace},
            "involvedObject": {"apiVersion": run.get("apiVersion"), "kind": run.get("kind"), "name": meta["name"],
                               "namespace": cluster.namespace, "uid": meta.get("uid")},
            "reason": reason, "message": message, "type": "Normal", "source": {"component": "trainctl"},
            "firstTimestamp": stamp, "lastTimestamp": stamp, "count": 1}  # fmt: skip
    with contextlib.suppress(EngineError):
        cluster.call(cluster.core().create_namespaced_event, cluster.namespace, body, _request_timeout=TIMEOUT,
                     verb="create", resource="events")  # fmt: skip


def delete(cluster: Cluster, kind: Kind, name: str) -> None:
    cluster.call(
        cluster.custom().delete_namespaced_custom_object, kind.group, kind.version, cluster.namespace, kind.plural,
        name, propagation_policy="Background", _request_timeout=TIMEOUT, verb="delete", resource=kind.resource,
        name=name,
    )  # fmt: skip


def delete_attempts(cluster: Cluster, kind: Kind, root: str) -> None:
    """Delete attempts 2.. of the run `root` (a cluster's garbage collector would, by their owner reference;
    a driver does not wait for it)."""
    found = cluster.call(
        cluster.custom().list_namespaced_custom_object, kind.group, kind.version, cluster.namespace, kind.plural,
        label_selector=f"{ATTEMPT_OF_LABEL}={root}", _request_timeout=TIMEOUT, verb="list", resource=kind.resource,
    )  # fmt: skip
    for obj in found.get("items", []):
        with contextlib.suppress(EngineError):
            delete(cluster, kind, str(meta_of(obj)["name"]))

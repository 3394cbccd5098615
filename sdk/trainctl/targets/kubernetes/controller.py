"""`trainctl-controller`: trainctl's retries of Kubernetes runs, from inside the cluster (k8s/controller.yaml).

It drives every TrainJob and PyTorchJob labelled `trainctl.dev/retries` (attempts.py), whoever created it:
`trainctl submit`, `trainctl k8s apply` or `kubectl apply`. Each second, the leader lists those objects
and advances each by one step (reconcile.Runs.step: the same steps the submitting machine's driver runs);
it deletes the attempts of a run whose object is gone (the cancel), as a garbage collector would.

Replicas elect a leader (the official client's kubernetes.leaderelection, client-go's algorithm) on a
ConfigMap lock, `<its namespace>/trainctl-controller`: the test API server serves ConfigMaps and not
Leases (coordination.k8s.io), and one lock kind everywhere keeps one code path. A replica that loses the
lock stops acting at once; acting twice would still be safe, since every write is keyed by the attempt
number (attempts.py). The lock's ConfigMap also says which namespaces the leader watches (`data.watch`),
and its last renewal tells `trainctl submit` and `status` whether a controller answers (presence.py).
"""

from __future__ import annotations

import argparse
import os
import socket
import sys
import threading
import time
from collections.abc import Sequence
from typing import Any

from ...errors import EngineError
from .attempts import ATTEMPT_OF_LABEL, RETRIES_LABEL
from .cluster import TIMEOUT, Cluster
from .kinds import KINDS, Kind
from .objects import meta_of
from .presence import LOCK_NAME, RENEWED_KEY, WATCH_KEY, default_namespace
from .reconcile import PodMemory, Runs, delete


def log(text: str) -> None:
    print(f"[trainctl-controller {time.strftime('%H:%M:%S')}] {text}", file=sys.stderr, flush=True)


def arguments(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="trainctl-controller", description=__doc__.splitlines()[0])
    parser.add_argument("--namespace", action="append", default=[],
                        help="a namespace to watch (repeat it); none: every namespace")  # fmt: skip
    parser.add_argument("--lock-namespace", default=os.environ.get("POD_NAMESPACE") or default_namespace(),
                        help="where its lock lives: its own namespace (POD_NAMESPACE)")  # fmt: skip
    parser.add_argument("--identity", default=os.environ.get("POD_NAME") or socket.gethostname())
    parser.add_argument("--lease-seconds", type=int, default=15)
    parser.add_argument("--renew-seconds", type=int, default=10)
    parser.add_argument("--retry-seconds", type=int, default=2)
    parser.add_argument("--interval", type=float, default=1.0, help="seconds between two passes over the runs")
    return parser.parse_args(argv)


class Controller:
    """One replica: its election, its pod memory, and the leader's passes over the runs."""

    def __init__(self, cluster: Cluster, args: argparse.Namespace) -> None:
        self.cluster, self.args = cluster, args
        self.leading = threading.Event()
        self.pods = PodMemory(cluster, args.namespace[0] if len(args.namespace) == 1 else None, log)
        self.runs = Runs(cluster, self.pods, log)

    def elect(self) -> None:
        """Stand for leader, for ever: a lost lock (or an API server away) clears `leading`, then stands again."""
        from kubernetes.leaderelection import electionconfig, leaderelection

        a = self.args
        while True:
            lock = dated_lock(a.lock_namespace, a.identity, ",".join(a.namespace) or "*")
            config = electionconfig.Config(lock, a.lease_seconds, a.renew_seconds, a.retry_seconds,
                                           self._started, self._stopped)  # fmt: skip
            try:
                leaderelection.LeaderElection(config).run()
            except Exception as exc:
                log(f"leader election: {exc!r}")
            self._stopped()
            time.sleep(a.retry_seconds)

    def _started(self) -> None:
        log(f"{self.args.identity} leads; watching {', '.join(self.args.namespace) or 'every namespace'}")
        self.leading.set()

    def _stopped(self) -> None:
        if self.leading.is_set():
            log(f"{self.args.identity} no longer leads")
        self.leading.clear()

    def run(self) -> None:
        threading.Thread(target=self.elect, name="trainctl-election", daemon=True).start()
        self.pods.start()
        while True:
            if self.leading.is_set() and self.pods.listed.is_set():
                self.one_pass()
            time.sleep(self.args.interval)

    def one_pass(self) -> None:
        """Advance every retried run one step; delete the attempts of runs whose object is gone."""
        for kind in KINDS.values():
            try:
                runs = self._list(kind, RETRIES_LABEL)
                roots = {(meta_of(o).get("namespace"), meta_of(o).get("name")) for o in runs}
                for run in runs:
                    if not self.leading.is_set():
                        return
                    self._step(kind, run)
                for obj in self._list(kind, ATTEMPT_OF_LABEL):
                    meta = meta_of(obj)
                    if (meta.get("namespace"), (meta.get("labels") or {}).get(ATTEMPT_OF_LABEL)) not in roots:
                        log(f"{meta.get('namespace')}/{meta.get('name')}: its run's object is gone: deleting it")
                        delete(self.runs.on(str(meta.get("namespace"))), kind, str(meta.get("name")))
            except EngineError as exc:
                log(f"listing {kind.kind}s: {exc}")

    def _step(self, kind: Kind, run: dict[str, Any]) -> None:
        try:
            self.runs.step(kind, run)
        except Exception as exc:  # one run's trouble never stops the others: tried again next pass
            log(f"{meta_of(run).get('namespace')}/{meta_of(run).get('name')}: {exc!r}")

    def _list(self, kind: Kind, label: str) -> list[dict[str, Any]]:
        if self.cluster.crd_installed(kind.resource) is False:
            return []
        api, found = self.cluster.custom(), []
        for ns in self.args.namespace or [None]:
            if ns is None:
                got = self.cluster.call(api.list_cluster_custom_object, kind.group, kind.version, kind.plural,
                                        label_selector=label, _request_timeout=TIMEOUT, verb="list",
                                        resource=kind.resource)  # fmt: skip
            else:
                got = self.cluster.call(api.list_namespaced_custom_object, kind.group, kind.version, ns, kind.plural,
                                        label_selector=label, _request_timeout=TIMEOUT, verb="list",
                                        resource=kind.resource)  # fmt: skip
            found += got.get("items", [])
        return found


def dated_lock(namespace: str, identity: str, watch: str) -> Any:
    """The official client's ConfigMapLock, whose every write also says, in the ConfigMap's data, when (epoch
    seconds: the record's own times are local times without a zone) and which namespaces it watches."""
    from kubernetes.leaderelection.resourcelock.configmaplock import ConfigMapLock

    class DatedLock(ConfigMapLock):
        def create(self, name: str, namespace: str, election_record: Any) -> bool:
            if not super().create(name, namespace, election_record):
                return False
            self.get(name, namespace)  # the created object, to write its data at once
            return bool(self.update(name, namespace, election_record))

        def update(self, name: str, namespace: str, updated_record: Any) -> bool:
            ref = self.configmap_reference
            assert ref is not None, "the election reads the lock before it writes it"
            ref.data = {**(ref.data or {}), RENEWED_KEY: f"{time.time():.3f}", WATCH_KEY: watch}
            return bool(super().update(name, namespace, updated_record))

    return DatedLock(LOCK_NAME, namespace, identity)


def main(argv: Sequence[str] | None = None) -> int:
    """The console script: in a pod, the service account; elsewhere, the kubeconfig (KUBECONFIG)."""
    from kubernetes import client, config

    args = arguments(argv)
    config.load_config()  # the default client: the election's ConfigMapLock builds its own from it
    cluster = Cluster(client.ApiClient(), None, args.lock_namespace)
    log(f"{args.identity} starts (lock {args.lock_namespace}/{LOCK_NAME})")
    Controller(cluster, args).run()
    return 0


if __name__ == "__main__":
    sys.exit(main())

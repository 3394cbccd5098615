"""A Kubernetes run's log: every pod's (or one rank's), streamed from the API server, each line prefixed by
its node rank."""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Iterator
from typing import Any

from ...errors import EngineError
from ...runs.progress import last_in
from ...runs.state import Progress, RunRef
from .cluster import TIMEOUT, Cluster
from .handle import KubernetesHandle
from .kinds import Kind
from .objects import cluster_for, find_job, get_job, pods_of
from .status import job_status


def _stream_pod(
    cluster: Cluster, kind: Kind, pod: str, prefix: str, follow: bool, out: queue.Queue[tuple[str, Any]]
) -> None:
    """Put the pod's log lines (prefixed) on `out`, then a ("done", None) marker; errors travel as ("error", exc)."""
    try:
        query = [("container", kind.container)] + ([("follow", "true")] if follow else [])
        resp = cluster.get(f"/api/v1/namespaces/{cluster.namespace}/pods/{pod}/log", query, verb="get",
                           resource="pods/log", name=pod, timeout=None if follow else TIMEOUT)  # fmt: skip
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
    cluster, name = cluster_for(run)
    deadline = time.monotonic() + wait_s
    kind, obj = find_job(cluster, name, KubernetesHandle.of(run).api)
    while True:
        if obj is None:
            raise EngineError(f"{kind.kind} {cluster.namespace}/{name} does not exist")
        pods = pods_of(cluster, kind, name)
        if rank is not None:
            pods = [p for p in pods if p[0] == rank]
        if pods or not follow or time.monotonic() >= deadline:
            break
        if job_status(kind, obj, {}).state.finished:
            break
        time.sleep(poll)
        obj = get_job(cluster, name, kind)
    if not pods:
        which = f"rank {rank}" if rank is not None else "any rank"
        raise EngineError(
            f"no pods for {which} of {kind.kind} {cluster.namespace}/{name} yet "
            f"(pods carry the label {kind.selector(name)})"
        )
    out: queue.Queue[tuple[str, Any]] = queue.Queue()
    threads = [
        threading.Thread(
            target=_stream_pod, args=(cluster, kind, pod["metadata"]["name"], f"[rank {r}] ", follow, out), daemon=True
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
        what, item = out.get()
        if what == "line":
            yield item
        elif what == "error":
            raise item
        else:
            done += 1


def progress(run: RunRef, lines: int = 200) -> Progress | None:
    """The last progress line in the log tail of the rank-0 pod (the trainer's rank 0 prints it, or a `command:`
    program does; docs/contracts.md "Progress"): where the API holds no progress (a PyTorchJob; a TrainJob
    without the `TrainJobStatus` gate, whose `status.trainerStatus` job_status reads first)."""
    cluster, name = cluster_for(run)
    kind, obj = find_job(cluster, name, KubernetesHandle.of(run).api)
    pods = [pod for rank, _, pod in pods_of(cluster, kind, name) if rank == 0] if obj is not None else []
    if not pods:
        return None
    pod = str(pods[0]["metadata"]["name"])
    try:
        resp = cluster.get(f"/api/v1/namespaces/{cluster.namespace}/pods/{pod}/log",
                           [("container", kind.container), ("tailLines", lines)], verb="get", resource="pods/log",
                           name=pod)  # fmt: skip
    except EngineError:
        return None
    return last_in(resp.data.decode("utf-8", "replace").splitlines())

"""`trainctl pull` / `Run.pull()` of a Kubernetes run: output_reader.py's plan, done (I/O: the cluster, the files
here). Needs create/get/delete on pods and get on pods/log in the run's namespace; no pods/exec."""

from __future__ import annotations

import os
import secrets
import shlex
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ...errors import EngineError
from ...runs.log_frames import log_files
from ...runs.state import RunRef
from . import output_reader as plan
from . import short_pods
from .cluster import Cluster
from .handle import KubernetesHandle
from .kinds import Kind
from .objects import find_job, pods_of, run_cluster

if TYPE_CHECKING:
    from ..transfer import Fetched


def where_of(run: RunRef) -> plan.Where:
    """The run's output folder on its PVC; EngineError when it kept it on its pods' emptyDir (gone with them)."""
    handle = KubernetesHandle.of(run)
    folder, mount = run.paths.output_dir, handle.pvc_mount_path
    if not folder:
        raise EngineError(f"{run.id}: the run store has no output folder for it")
    if handle.pvc is None or not mount:
        raise EngineError(
            f"{run.id}: its output folder {folder} was on its pods' emptyDir (no kubernetes.pvc), which went with "
            "them; set kubernetes.pvc (or output_dir: s3://...) so the next run's output outlives its pods"
        )
    if not (folder == mount or folder.startswith(mount.rstrip("/") + "/")):
        raise EngineError(
            f"{run.id}: its output folder {folder} is not on its PVC {handle.pvc} (mounted at {mount}), the one "
            "claim pull reads: `kubectl cp` it from a pod that mounts where it is"
        )
    return plan.Where(handle.pvc, mount, folder)


def by_hand(namespace: str, where: plan.Where) -> str:
    """The kubectl way, for what cannot come through a log: a pod that mounts the claim, then `kubectl cp`."""
    return (
        f"run a pod in namespace {namespace} that mounts PVC {where.pvc} at {where.mount}, then `kubectl -n "
        f"{namespace} cp POD:{shlex.quote(where.folder)} ./output` (kubectl cp needs pods/exec)"
    )


def fetch_output(run: RunRef, dest: Path, limit: int | None = None, timeout: float = 600.0) -> Fetched:
    """The run's output folder's files (the final model first) into `dest`, through a reader pod's log, each
    checked against its sha256 and written whole (aside, then renamed); the pod is deleted on every path.
    `limit`: the bytes one pod log carries whole (default output_reader.LOG_LIMIT, read at call time)."""
    from ..transfer import Fetched

    where = where_of(run)
    cluster, name = run_cluster(run)
    kind, obj = find_job(cluster, name, KubernetesHandle.of(run).api)
    pod_spec = _pod_spec(cluster, kind, name)
    image = run.provenance.image if run.provenance else plan.image_of(obj, pod_spec)
    if not image:
        raise EngineError(f"{run.id}: neither the run store nor the cluster says which image it ran (the reader pod's)")
    pod_name = f"{name[:40].rstrip('-')}-pull-{secrets.token_hex(2)}"
    body = plan.reader_pod(
        pod_name, cluster.namespace, image, where, job_name=run.job_name,
        owner=(kind, obj) if obj is not None else None, scheduling=pod_spec, limit=limit or plan.LOG_LIMIT,
        deadline_s=int(timeout),
    )  # fmt: skip
    try:
        short_pods.create(cluster, body)
        phase = short_pods.wait_ended(cluster, pod_name, timeout, f"{run.id}: the reader pod")
        lines = short_pods.log_lines(cluster, pod_name)
    finally:
        short_pods.delete(cluster, pod_name)
    if phase != "Succeeded":
        said = [line for line in lines if not line.startswith(plan.MARK + " ")][-10:]
        raise EngineError(
            f"{run.id}: the reader pod {pod_name} could not read its output folder {where}: it ended {phase}"
            + ("; its log:\n" + "\n".join(said) if said else "")
        )
    try:
        files, notes = plan.verified(run.id, where, log_files(lines, plan.MARK), by_hand(cluster.namespace, where))
    except ValueError as exc:
        raise EngineError(str(exc)) from None
    write_all(dest, files)
    return Fetched(dest, str(where) + "".join(f"; {note}" for note in notes))


def _pod_spec(cluster: Cluster, kind: Kind, name: str) -> dict[str, Any]:
    """One of the run's pods' spec, if any is left: its image, pull secrets, service account, node selector."""
    try:
        pods = pods_of(cluster, kind, name)
    except EngineError:
        return {}
    if not pods:
        return {}
    spec: dict[str, Any] = pods[0][2].get("spec") or {}
    return spec


def write_all(dest: Path, files: dict[str, bytes]) -> None:
    """Each file written aside and renamed into `dest`, so a reader never sees half of one."""
    dest.mkdir(parents=True, exist_ok=True)
    for name, data in files.items():
        part = dest / f".{name}.part"
        part.write_bytes(data)
        os.replace(part, dest / name)

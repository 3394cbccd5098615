"""`trainctl k8s cp-data JOB`: the copy of data_copy.py's plan, done (I/O: the files here, the cluster)."""

from __future__ import annotations

import io
import secrets
import tarfile
from dataclasses import dataclass, field
from pathlib import Path

from ...errors import EngineError, JobError
from ...spec.job_spec import JobSpec
from . import data_copy as plan
from . import short_pods
from .cluster import TIMEOUT, Cluster, connect
from .section import KubernetesSection


@dataclass
class Copy:
    """What a copy did, or (`commands`) what to run by hand instead."""

    inputs: list[plan.Input]
    pod: str
    size: int = 0
    parts: int = 0
    commands: str | None = None  # set when the copy was not done here
    why_not: str = ""
    log: list[str] = field(default_factory=list)


def archive(inputs: list[plan.Input], base: Path) -> bytes:
    """A tar.gz of every input (file or folder, read under `base`, the job file's folder) at its path inside
    the claim; JobError naming each one that is missing."""
    missing = [f"data.{i.name}: {base / i.member} does not exist" for i in inputs if not (base / i.member).exists()]
    if missing:
        raise JobError(missing)
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w:gz", compresslevel=6) as tar:
        for found in inputs:
            tar.add(str(base / found.member), arcname=found.member)
    return out.getvalue()


def copy_data(job: JobSpec, *, kubeconfig: str | None = None, print_only: bool = False, timeout: float = 600.0) -> Copy:
    """Copy the job's relative data inputs onto its PVC through a short-lived pod (data_copy.py), or, past
    MAX_PARTS or with `print_only`, return the kubectl commands that do it by hand."""
    sec = job.section_as("kubernetes", KubernetesSection)
    if sec.pvc is None:
        raise JobError(["kubernetes.pvc: not set, so no data is read from a PVC and there is nothing to copy"])
    inputs = plan.pvc_inputs(job, sec)
    name = plan.pod_name(job, secrets.token_hex(2))
    if not inputs:
        return Copy(inputs, name)
    blob = archive(inputs, job.base_dir or Path.cwd())
    pieces = plan.parts(blob)
    done = Copy(inputs, name, size=len(blob), parts=len(pieces))
    if print_only or len(pieces) > plan.MAX_PARTS:
        done.commands = plan.kubectl_commands(job, sec, inputs, name)
        if not print_only:
            done.why_not = (
                f"the data is {len(blob):,} bytes compressed: more than {plan.MAX_PARTS} ConfigMaps of "
                f"{plan.PART_BYTES:,} bytes, which trainctl does not put into the cluster's etcd"
            )
        return done
    cluster = connect(sec.context, sec.namespace, kubeconfig)
    try:
        for body in plan.part_configmaps(job, sec.namespace, name, pieces):
            cluster.call(
                cluster.core().create_namespaced_config_map, sec.namespace, body, _request_timeout=TIMEOUT,
                verb="create", resource="configmaps", name=body["metadata"]["name"],
            )  # fmt: skip
        short_pods.create(cluster, plan.copy_pod(job, sec, name, len(pieces)))
        phase = short_pods.wait_ended(cluster, name, timeout, "the copy pod")
        done.log = _log(cluster, name)
        if phase != "Succeeded":
            tail = "\n".join(done.log[-20:])
            raise EngineError(f"the copy pod {name} ended {phase}" + (f"; its log:\n{tail}" if tail else ""))
    finally:
        _clean(cluster, name)
    return done


def _log(cluster: Cluster, name: str) -> list[str]:
    try:
        return short_pods.log_lines(cluster, name)
    except EngineError:  # a log is a courtesy here: the phase already said how it ended
        return []


def _clean(cluster: Cluster, name: str) -> None:
    """Delete the pod and its parts, whatever happened (each at most once; a missing one is fine)."""
    short_pods.delete(cluster, name)
    try:
        cluster.core().delete_collection_namespaced_config_map(
            namespace=cluster.namespace, label_selector=f"{plan.LABEL}={name}", _request_timeout=TIMEOUT
        )
    except Exception:  # best effort: the copy's own outcome is what is reported
        return

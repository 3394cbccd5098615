"""Job -> the Kubernetes manifest: a Kubeflow Trainer v2 TrainJob (default, `trainjob.py`) or a Training
Operator v1.9 PyTorchJob (`kubernetes.api: pytorchjob`, `pytorchjob.py`). Pure and deterministic:
no I/O, no kubernetes import."""

from __future__ import annotations

from typing import Any

from ...bundle import describe
from ...spec import JobSpec
from ..base import Rendered
from .code import code_bundle, configmap_name
from .pytorchjob import (
    CONTAINER,
    GROUP,
    OP_JOB_NAME,
    OP_REPLICA_INDEX,
    OP_REPLICA_TYPE,
    PLURAL,
    VERSION,
    build_pytorchjob,
    webhook_problems,
)
from .section import KubernetesSection
from .trainjob import build_trainjob
from .yaml_bytes import manifest_yaml

__all__ = [
    "CONTAINER", "GROUP", "OP_JOB_NAME", "OP_REPLICA_INDEX", "OP_REPLICA_TYPE", "PLURAL", "VERSION",
    "build_manifest", "render", "webhook_problems",
]  # fmt: skip


def section(job: JobSpec) -> KubernetesSection:
    sec = job.section("kubernetes")
    assert isinstance(sec, KubernetesSection)
    return sec


def build_manifest(job: JobSpec) -> dict[str, Any]:
    """The job's TrainJob or PyTorchJob (kubernetes.api) as a dict; JobError naming each bad field."""
    sec = section(job)
    return build_trainjob(job, sec) if sec.api == "trainjob" else build_pytorchjob(job, sec)


def render(job: JobSpec) -> Rendered:
    """The manifest for a job (what `kubectl apply -f` would take)."""
    manifest = build_manifest(job)
    notes: list[str] = []
    sec = section(job)
    if sec.pvc is None and not job.checkpoint.dir:
        notes.append("kubernetes.pvc is unset: checkpoints go to an emptyDir and do not survive a pod's deletion")
    if job.spot:
        notes.append("spot: Kubernetes has no single spot flag; select spot nodes with node_selector/tolerations")
    bundle = code_bundle(job)
    if bundle is not None:
        notes.append(describe(bundle, f"ConfigMap {configmap_name(job, bundle)} (binaryData, owned by the job)"))
    if sec.pvc is not None:
        notes.append(f"needs PersistentVolumeClaim {sec.pvc!r} in namespace {sec.namespace!r} (kubectl apply -k k8s/)")
    if sec.api == "trainjob":
        runtime = manifest["spec"]["runtimeRef"]["name"]
        notes.append(f"needs Kubeflow Trainer v2.3.0 and ClusterTrainingRuntime {runtime!r} (kubectl apply -k k8s/)")
    kind = manifest["kind"].lower()
    return Rendered(
        target="kubernetes",
        text=manifest_yaml(manifest),
        native=manifest,
        filename=f"{job.name}.{kind}.yaml",
        notes=tuple(notes),
    )

"""Job -> the Kubernetes manifest: a Kubeflow Trainer v2 TrainJob (default, `trainjob.py`) or a Training
Operator v1.9 PyTorchJob (`kubernetes.api: pytorchjob`, `pytorchjob.py`). Pure and deterministic:
no I/O, no kubernetes import."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ...spec.job_spec import JobSpec
from ...submit.bundle import describe
from ..base import Rendered
from ..program import output_notes, s3_inputs, staging_notes, streaming_notes
from .code import code_bundle, configmap_name
from .pod import _Paths
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
    "build_manifest", "render", "run_paths", "webhook_problems",
]  # fmt: skip


def build_manifest(job: JobSpec, name: str | None = None, avoid_nodes: Sequence[str] = ()) -> dict[str, Any]:
    """The job's TrainJob or PyTorchJob (kubernetes.api) named `name` (one run's object; default: the job's
    name) as a dict; JobError naming each bad field. `avoid_nodes`: the nodes earlier attempts blamed (data,
    read by the engine): a retry's pods get a required node anti-affinity against them."""
    sec = job.section_as("kubernetes", KubernetesSection)
    build = build_trainjob if sec.api == "trainjob" else build_pytorchjob
    return build(job, sec, name, avoid_nodes)


def run_paths(manifest: dict[str, Any]) -> dict[str, str]:
    """Where the run keeps its state in its pods (its folder on the PVC): from the trainer container's env."""
    if manifest["kind"] == "TrainJob":
        env = manifest["spec"]["trainer"]["env"]
    else:
        first = next(iter(manifest["spec"]["pytorchReplicaSpecs"].values()))
        env = first["template"]["spec"]["containers"][0]["env"]
    values = {e["name"]: str(e.get("value", "")).replace("$$", "$") for e in env}
    run_dir = values["TRAINCTL_RUN_DIR"]
    return {
        "run_dir": run_dir,
        "checkpoint_dir": values["TRAINER_CHECKPOINT_DIR"],
        "output_dir": values["TRAINER_OUTPUT_DIR"],
        "work_dir": f"{run_dir}/work",
    }


def render(job: JobSpec) -> Rendered:
    """The manifest for a job (what `kubectl apply -f` and `trainctl k8s apply` take)."""
    manifest = build_manifest(job)
    notes: list[str] = [
        f"`trainctl submit` names each run's object {job.name}-<4 hex> (its folder on the PVC: <object>-<run uid>): a new run "
        f"each time; `trainctl k8s apply` applies this one, named {job.name}"
    ]
    sec = job.section_as("kubernetes", KubernetesSection)
    if sec.pvc is None:
        notes.append(
            "kubernetes.pvc is unset: the run's checkpoints, output and work/ are on the pod's emptyDir "
            "(/workspace) and do not survive the pod"
            + (" (checkpoint.dir is set: those go there)" if job.checkpoint.dir else "")
        )
    if job.spot:
        notes.append("spot: Kubernetes has no single spot flag; select spot nodes with node_selector/tolerations")
    bundle = code_bundle(job)
    if bundle is not None:
        notes.append(describe(bundle, f"ConfigMap {configmap_name(job.name, bundle)} (binaryData, owned by the job)"))
    if sec.pvc is not None:
        notes.append(f"needs PersistentVolumeClaim {sec.pvc!r} in namespace {sec.namespace!r} (kubectl apply -k k8s/)")
        notes += _data_notes(job, sec)
    notes += _staging_notes(job, sec) + streaming_notes(job)
    notes += output_notes(job)
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


def _staging_notes(job: JobSpec, sec: KubernetesSection) -> list[str]:
    """Where each `s3://` input is read from: the launchers' cache on the PVC (or, without one, the pod's emptyDir)."""
    if not s3_inputs(job):
        return []
    cache = _Paths(job, sec, job.name).data_cache()
    if sec.pvc is not None:
        by = f"by one pod's launcher (under the cache's lock; the others wait) on the PVC {sec.pvc!r}"
        return staging_notes(job, cache, by)
    notes = staging_notes(job, cache, "by each pod's launcher")
    notes.append(
        f"kubernetes.pvc is unset: the s3:// inputs are cached on each pod's emptyDir ({cache}), so every pod "
        "downloads its own copy and no later run reuses it; set kubernetes.pvc to share one cache"
    )
    return notes


def _data_notes(job: JobSpec, sec: KubernetesSection) -> list[str]:
    """Where each relative data path is read (on the PVC, not on this machine), and the copy that puts it there."""
    notes = []
    for name, uri in sorted(job.data.items()):
        path = uri.removeprefix("file://")
        if "://" in path or path.startswith("/"):
            continue
        inside = f"{sec.pvc_mount_path}/{path.removeprefix('./')}"
        notes.append(
            f"data.{name}: {uri} is read on the PVC {sec.pvc!r} at {inside}, not from this machine: copy it there "
            f"first with `trainctl k8s cp-data <job file>` (a short-lived pod; `--print` shows the kubectl "
            f"commands instead)"
        )
    return notes

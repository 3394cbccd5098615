"""The job's code bundle on Kubernetes: a ConfigMap (binaryData) owned by the job, mounted read-only (pure).

The apiserver refuses a ConfigMap whose data and binaryData hold more than 1 MiB in total
(`ValidateConfigMap` in kubernetes pkg/apis/core/validation/validation.go: `totalSize > core.MaxSecretSize`,
`MaxSecretSize = 1 * 1024 * 1024` in pkg/apis/core/types.go). A larger bundle is refused here, before
anything is applied, naming its size and what to leave out.
"""

from __future__ import annotations

import base64
from typing import TYPE_CHECKING, Any

from ...errors import JobError
from ...spec.code import Bundle
from ...submit.bundle import BUNDLE_NAME, launcher_env, prepared

if TYPE_CHECKING:
    from ...spec.job_spec import JobSpec

CONFIGMAP_LIMIT = 1024 * 1024
"""core.MaxSecretSize, which ValidateConfigMap applies to data + binaryData."""
MOUNT = "/opt/trainctl/code-bundle"
VOLUME = "code-bundle"


def configmap_name(name: str, bundle: Bundle) -> str:
    """One per run's object (`name`), which owns it: deleting one run never takes another's code away."""
    return f"{name}-code-{bundle.sha256[:12]}"


def code_bundle(job: JobSpec) -> Bundle | None:
    """The job's bundle, or JobError when it cannot travel in a ConfigMap."""
    bundle = prepared(job)
    if bundle is not None and bundle.size > CONFIGMAP_LIMIT:
        largest = ", ".join(f"{p} ({s:,} B)" for p, s in sorted(bundle.files, key=lambda f: -f[1])[:3])
        raise JobError(
            [
                f"code.dir: the bundle is {bundle.size:,} bytes; a ConfigMap holds at most {CONFIGMAP_LIMIT:,} "
                f"(the apiserver's limit). Largest files: {largest}. Leave data and weights out with "
                "code.exclude or .gitignore and pass them as data: inputs"
            ]
        )
    return bundle


def pod_parts(
    job: JobSpec, bundle: Bundle, name: str, work_dir: str
) -> tuple[dict[str, Any], dict[str, Any], dict[str, str]]:
    """(volume, volumeMount, env) that put the bundle into the trainer container of the run whose object is
    `name`; the launcher unpacks it into the run's `work_dir` (on the PVC: every node unpacks into the same
    folder, the first rename wins)."""
    volume = {
        "name": VOLUME,
        "configMap": {"name": configmap_name(name, bundle), "items": [{"key": BUNDLE_NAME, "path": BUNDLE_NAME}]},
    }
    mount = {"name": VOLUME, "mountPath": MOUNT, "readOnly": True}
    env = launcher_env(bundle, f"{MOUNT}/{BUNDLE_NAME}", work_dir)
    return volume, mount, env


def configmap(
    job: JobSpec, bundle: Bundle, namespace: str, owner: dict[str, Any] | None, name: str | None = None
) -> dict[str, Any]:
    """The ConfigMap of the run whose object is `name` (default: the job's name); with `owner` (the applied
    object's apiVersion/kind/name/uid) it is deleted with it."""
    metadata: dict[str, Any] = {
        "name": configmap_name(name or job.name, bundle),
        "namespace": namespace,
        "labels": {"app.kubernetes.io/managed-by": "trainctl", "trainctl.dev/job": job.name},
        "annotations": {"trainctl.dev/code-sha256": bundle.sha256},
    }
    if owner is not None:
        metadata["ownerReferences"] = [{**owner, "controller": False, "blockOwnerDeletion": False}]
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": metadata,
        "immutable": True,
        "binaryData": {BUNDLE_NAME: base64.b64encode(bundle.data).decode()},
    }

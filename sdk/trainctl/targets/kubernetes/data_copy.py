"""Copying a job's local data onto its PVC (`trainctl k8s cp-data JOB`), as the plan: pure.

A relative data path (`data/digits/train.jsonl`) is read on the job's PVC at `<pvc_mount_path>/<path>`
(pod.py `resolve`), not from this machine. `kubectl cp` puts a file there through a pod that mounts the claim,
streaming a tar archive over `exec`. trainctl does the same without `exec`: the archive travels in ConfigMaps,
as the code bundle does (code.py; the apiserver holds at most 1 MiB in one, so the archive is cut into
parts), and a short-lived pod of the job's own image, under the job's own security context, mounts them and the
claim and unpacks the parts in order into the claim. Then the pod and the parts are deleted (engine.copy_data).
Past MAX_PARTS (a data set is not meant to live in etcd), or with `--print`, the exact kubectl commands are
printed instead: the same pod with a sleep, `kubectl cp` for each input, the pod's deletion.
"""

from __future__ import annotations

import base64
import shlex
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .code import CONFIGMAP_LIMIT
from .pod import JOB_LABEL, MANAGED_BY, pod_labels, security_contexts
from .yaml_bytes import manifest_yaml

if TYPE_CHECKING:
    from ...spec.job_spec import JobSpec
    from .section import KubernetesSection

PART_BYTES = CONFIGMAP_LIMIT - 4096  # the apiserver's limit on a ConfigMap's data, with room for the key
MAX_PARTS = 32
"""32 ConfigMaps (32 MiB of compressed data) at most: more is refused and the kubectl commands printed."""
PARTS_ROOT = "/run/trainctl-cp"  # the parts, read-only; the claim at its own mount path
LABEL = "trainctl.io/cp-data"


@dataclass(frozen=True)
class Input:
    """A data input of the job read on its PVC: its name, where it is here, where it goes inside the claim."""

    name: str
    given: str  # as written in the job (`data/digits/train.jsonl`)
    member: str  # relative to the job file's folder here, and to the claim's mount there
    inside: str  # inside the claim's mount (`/mnt/trainctl/data/digits/train.jsonl`)


def pvc_inputs(job: JobSpec, sec: KubernetesSection) -> list[Input]:
    """The job's data inputs given as relative paths: each read on the PVC (pod.py `resolve`), so each one to
    copy there (render's notes say so; cp_data.py copies them)."""
    found = []
    for name, uri in sorted(job.data.items()):
        path = uri.removeprefix("file://")
        if "://" in path or path.startswith("/") or sec.pvc is None:
            continue
        member = path.removeprefix("./").strip("/")
        found.append(Input(name, uri, member, f"{sec.pvc_mount_path}/{member}"))
    return found


def pod_name(job: JobSpec, token: str) -> str:
    return f"{job.name[:40].rstrip('-')}-cp-data-{token}"


def parts(archive: bytes) -> list[bytes]:
    """The archive cut into pieces that each fit in a ConfigMap."""
    return [archive[i : i + PART_BYTES] for i in range(0, len(archive), PART_BYTES)] or [b""]


def part_configmaps(job: JobSpec, namespace: str, name: str, pieces: list[bytes]) -> list[dict[str, Any]]:
    """One immutable ConfigMap per piece, named `<pod>-<index>` and labelled with the pod they belong to."""
    labels = {**MANAGED_BY, JOB_LABEL: job.name, LABEL: name}
    return [
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": f"{name}-{i:03d}", "namespace": namespace, "labels": labels},
            "immutable": True,
            "binaryData": {"part": base64.b64encode(piece).decode()},
        }
        for i, piece in enumerate(pieces)
    ]


def copy_pod(job: JobSpec, sec: KubernetesSection, name: str, count: int | None) -> dict[str, Any]:
    """The pod that unpacks `count` parts into the claim; with None, one that sleeps for `kubectl cp` instead.
    The job's image (the cluster can pull it; it has sh, cat and tar) and the job's pod security context."""
    assert sec.pvc is not None
    pod_security, container_security = security_contexts()
    mounts: list[dict[str, Any]] = [{"name": "claim", "mountPath": sec.pvc_mount_path}]
    volumes: list[dict[str, Any]] = [{"name": "claim", "persistentVolumeClaim": {"claimName": sec.pvc}}]
    for i in range(count or 0):
        mounts.append({"name": f"part-{i:03d}", "mountPath": f"{PARTS_ROOT}/{i:03d}", "readOnly": True})
        volumes.append({"name": f"part-{i:03d}", "configMap": {"name": f"{name}-{i:03d}"}})
    unpack = f"cat {PARTS_ROOT}/*/part | tar -xzof - -C {shlex.quote(sec.pvc_mount_path)}"
    script = f"set -e; {unpack}; echo unpacked into {sec.pvc_mount_path}" if count else "sleep 3600"
    labels = {**pod_labels(job, sec), LABEL: name}
    spec: dict[str, Any] = {
        "restartPolicy": "Never",
        "securityContext": pod_security,
        "containers": [
            {
                "name": "copy",
                "image": job.image,
                "command": ["sh", "-c", script],
                "securityContext": container_security,
                "volumeMounts": mounts,
                "resources": {"requests": {"cpu": "100m", "memory": "64Mi"}, "limits": {"memory": "256Mi"}},
            }
        ],
        "volumes": volumes,
        "activeDeadlineSeconds": 3600,
    }
    if sec.service_account:
        spec["serviceAccountName"] = sec.service_account
    if sec.image_pull_secrets:
        spec["imagePullSecrets"] = [{"name": s} for s in sec.image_pull_secrets]
    metadata = {"name": name, "namespace": sec.namespace, "labels": labels}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": spec}


def kubectl_commands(job: JobSpec, sec: KubernetesSection, inputs: list[Input], name: str) -> str:
    """The same copy by hand, from the job file's folder: a pod that mounts the claim, `kubectl cp`, delete."""
    kubectl = "kubectl" + (f" --context {shlex.quote(sec.context)}" if sec.context else "")
    kubectl += f" -n {shlex.quote(sec.namespace)}"
    lines = [f"{kubectl} apply -f - <<'EOF'", manifest_yaml(copy_pod(job, sec, name, None)).rstrip("\n"), "EOF"]
    lines.append(f"{kubectl} wait --for=condition=Ready pod/{name} --timeout=5m")
    parents = sorted({str(Path(found.inside).parent) for found in inputs})
    lines.append(f"{kubectl} exec {name} -- mkdir -p {' '.join(shlex.quote(p) for p in parents)}")
    for found in inputs:
        lines.append(f"{kubectl} cp {shlex.quote(found.member)} {name}:{shlex.quote(found.inside)}")
    lines.append(f"{kubectl} delete pod {name}")
    return "\n".join(lines) + "\n"

"""`trainctl pull` of a Kubernetes run, as the plan: the reader pod and the checks on what it printed (pure).

A run's output folder sits on its PVC, which only a pod can read. `kubectl cp` reads it with tar over
pods/exec; trainctl needs only what it already uses for a function's results: a pod's log, read through
the API server (`GET /api/v1/namespaces/{namespace}/pods/{name}/log`, the pods/log subresource of the
core/v1 API). So a short-lived pod of the run's own image (it has the trainer, `python -m
trainer.output_log`), in the run's namespace, owned by the run's object (`metadata.ownerReferences`: the
garbage collector deletes it with the run if this machine never does), mounts the claim read-only and prints
the folder's files as framed base64 with a manifest of sha256s (trainer/log_frames.py); output_pull.py reads
the log, joins the files (runs/log_frames.py), checks them here and writes them.

LOG_LIMIT: pods/log serves the container's current log file only, and the kubelet rotates that file at
`containerLogMaxSize`, 10Mi by default (kubernetes.io/docs/concepts/cluster-administration/logging/, "Log
rotation"): 6 MiB of files is 8 MiB of base64, which stays whole in one file. Larger outputs are named with
their sizes and what to do instead.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from typing import Any

from .kinds import Kind
from .pod import JOB_LABEL, MANAGED_BY, security_contexts

LOG_LIMIT = 6 << 20
MARK = "trainctl-output-file"  # trainer/output_log.py MARK (the trainer never imports the SDK)
MANIFEST = ".manifest"
LABEL = "trainctl.io/pull"
SCHEDULING = ("serviceAccountName", "imagePullSecrets", "nodeSelector", "tolerations", "affinity")
"""Copied from one of the run's pods when one is left: where its image can be pulled and its claim mounted."""


@dataclass(frozen=True)
class Where:
    """The run's output folder: on which claim, mounted where, at which path inside the pods."""

    pvc: str
    mount: str
    folder: str

    def __str__(self) -> str:
        return f"pvc://{self.pvc}{self.folder.removeprefix(self.mount)} ({self.folder} in its pods)"


def reader_pod(
    name: str, namespace: str, image: str, where: Where, *, job_name: str = "", owner: tuple[Kind, dict[str, Any]] | None = None,
    scheduling: dict[str, Any] | None = None, limit: int = LOG_LIMIT, deadline_s: int = 600,
) -> dict[str, Any]:  # fmt: skip
    """The pod that prints the folder's files to its log (trainer/output_log.py), under the trainer pods'
    security context, the claim mounted read-only at the run's own mount path."""
    pod_security, container_security = security_contexts()
    labels = {**MANAGED_BY, LABEL: name, **({JOB_LABEL: job_name} if job_name else {})}
    metadata: dict[str, Any] = {"name": name, "namespace": namespace, "labels": labels}
    if owner is not None:
        kind, obj = owner
        meta = obj.get("metadata") or {}
        ref = {
            "apiVersion": f"{kind.group}/{kind.version}",
            "kind": kind.kind,
            "name": meta.get("name"),
            "uid": meta.get("uid"),
        }
        metadata["ownerReferences"] = [ref]
    spec: dict[str, Any] = {
        "restartPolicy": "Never",
        "securityContext": pod_security,
        "containers": [
            {
                "name": "read",
                "image": image,
                "command": ["python", "-m", "trainer.output_log", where.folder, str(limit)],
                "env": [{"name": "PYTHONDONTWRITEBYTECODE", "value": "1"}],
                "securityContext": container_security,
                "volumeMounts": [{"name": "claim", "mountPath": where.mount, "readOnly": True}],
                "resources": {"requests": {"cpu": "100m", "memory": "128Mi"}, "limits": {"memory": "512Mi"}},
            }
        ],
        "volumes": [{"name": "claim", "persistentVolumeClaim": {"claimName": where.pvc, "readOnly": True}}],
        "activeDeadlineSeconds": deadline_s,
        **{k: v for k, v in (scheduling or {}).items() if k in SCHEDULING and v},
    }
    return {"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": spec}


def image_of(obj: dict[str, Any] | None, pod_spec: dict[str, Any]) -> str | None:
    """The run's image where the run store has none (a run submitted through the engine alone): its TrainJob's
    `spec.trainer.image`, its PyTorchJob's replica template, else one of its pods' first container."""
    spec = (obj or {}).get("spec") or {}
    found = [str((spec.get("trainer") or {}).get("image") or "")]
    for replica in (spec.get("pytorchReplicaSpecs") or {}).values():
        found += [
            str(c.get("image") or "") for c in (replica.get("template") or {}).get("spec", {}).get("containers", [])
        ]
    found += [str(c.get("image") or "") for c in pod_spec.get("containers") or []]
    return next((image for image in found if image), None)


def verified(run_id: str, where: Where, files: dict[str, bytes], hint: str) -> tuple[dict[str, bytes], list[str]]:
    """The files the pod sent, each checked against its manifest's sha256 (and the weights against model.json's),
    and notes on what was left out; ValueError naming the run, the folder and what to do when the model cannot
    come this way. `hint`: how to copy it instead."""
    raw = files.pop(MANIFEST, None)
    if raw is None:
        raise ValueError(f"{run_id}: the reader pod's log ended before its manifest: the log was cut short")
    manifest = json.loads(raw)
    listed: dict[str, dict[str, Any]] = {
        n: e for n, e in manifest["files"].items() if n == n.strip("./") and "/" not in n
    }
    files = {n: data for n, data in files.items() if n in listed}  # plain names in the folder, nothing else
    if manifest.get("missing"):
        raise ValueError(f"{run_id}: model.json names {', '.join(manifest['missing'])}, which is not in {where}")
    if not listed:
        raise ValueError(f"{run_id}: its output folder {where} holds no files: the run wrote none")
    for name, entry in listed.items():
        if "sha256" not in entry:
            continue
        if name not in files:
            raise ValueError(f"{run_id}: {name} did not come whole through the reader pod's log (cut short)")
        if hashlib.sha256(files[name]).hexdigest() != entry["sha256"]:
            raise ValueError(f"{run_id}: {name} does not match the sha256 the reader pod computed on {where}")
    left = {n: int(e["size"]) for n, e in listed.items() if "sha256" not in e}
    model = json.loads(files["model.json"]) if "model.json" in files else None
    weights = str(model.get("file") or "") if isinstance(model, dict) else ""
    too_big = [n for n in ("model.json", weights) if n in left]
    if too_big:
        sizes = ", ".join(f"{n} {left[n] / (1 << 20):.1f} MiB" for n in too_big)
        raise ValueError(
            f"{run_id}: the final model is too large to come through a pod log ({sizes}; at most "
            f"{manifest['limit']:,} bytes in all, which the kubelet's log rotation keeps whole): set "
            f"the job's output_dir to an s3:// prefix (`trainctl pull` then reads it there), or copy {where} "
            f"by hand: {hint}"
        )
    expected = model.get("sha256") if weights and isinstance(model, dict) else None
    if expected and hashlib.sha256(files[weights]).hexdigest() != expected:
        raise ValueError(f"{run_id}: {weights} does not match the sha256 in its model.json on {where}")
    notes = [
        f"{n} ({size:,} bytes) left on the PVC: past the {manifest['limit']:,}-byte limit" for n, size in left.items()
    ]
    return files, notes

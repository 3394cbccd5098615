"""Absolute data paths that no volume of the job's pods provides: said by `validate`, `render` and `submit`.

A pod sees its image's files, the PVCs the manifest mounts (pod.py) and empty scratch volumes. An absolute
path elsewhere, such as `data.train: /data/train.jsonl`, is read from the image: allowed (data baked into an
image), so a warning, not a refusal; most often it is a folder of another machine. Pure: no I/O.
"""

from __future__ import annotations

from ...spec.job_spec import JobSpec
from .pod import SCRATCH_MOUNTS, _Paths
from .section import KubernetesSection


def mounted(job: JobSpec) -> dict[str, str]:
    """{mount path: what it holds} for every volume of the trainer container, as pod.pod_parts mounts them
    (tests/kubernetes/test_render_mounts.py checks them against the rendered manifests)."""
    sec = job.section_as("kubernetes", KubernetesSection)
    paths = _Paths(job, sec, job.name)
    for name, uri in job.data.items():
        paths.resolve(uri, f"data.{name}")  # a pvc://claim/... input mounts that claim
    found = {"/dev/shm": "the pod's in-memory /dev/shm", **{path: "empty scratch space" for path, _ in SCRATCH_MOUNTS}}
    if sec.pvc is not None:
        found[sec.pvc_mount_path] = f"the PVC {sec.pvc!r}"
    found.update({mount: f"the PVC {claim!r}" for claim, mount in paths.claims.items()})
    return found


def _inputs(job: JobSpec) -> dict[str, str]:
    """{field: absolute path} of the job's file inputs (a `pvc://` input is mounted; an `s3://` one staged)."""
    found = {f"data.{name}": uri.removeprefix("file://") for name, uri in sorted(job.data.items())}
    if job.trainer is not None:
        for name in ("train_data", "val_data"):
            value = getattr(job.trainer, name)
            if value is not None:
                found[f"trainer.{name}"] = value
    return {field: path for field, path in found.items() if path.startswith("/")}


def unmounted_inputs(job: JobSpec) -> list[str]:
    """One warning per absolute input path under no PVC of the pod: read from the image, or from empty scratch."""
    sec = job.section_as("kubernetes", KubernetesSection)
    volumes = mounted(job)
    where = (
        f"pvc://{sec.pvc}/<path> (the PVC is mounted at {sec.pvc_mount_path})" if sec.pvc else "pvc://<claim>/<path>"
    )
    warnings = []
    for field, path in _inputs(job).items():
        under = [m for m in volumes if path == m or path.startswith(m.rstrip("/") + "/")]
        what = volumes[max(under, key=len)] if under else None
        if what is not None and what.startswith("the PVC"):
            continue
        if what is None:
            said = "no volume of the pod holds it, so it is read from the image and must be in it"
        else:
            said = f"it is on {what}, which holds nothing when the trainer starts"
        warnings.append(f"{field}: {path}: {said}; for a file on a PVC give {where}")
    return warnings

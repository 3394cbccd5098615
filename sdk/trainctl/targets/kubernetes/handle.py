"""What a Kubernetes run records to be found again: the cluster, namespace and kind of its object."""

from __future__ import annotations

from pydantic import Field

from ...runs.state import TargetHandle


class KubernetesHandle(TargetHandle):
    """The cluster (kubeconfig context), the object's API (TrainJob or PyTorchJob) and the PVC of its folder;
        the namespace and name are the run's native id `<namespace>/<name>` (with trainctl's retries: the first
    attempt's object; the driver's record names the current one)."""

    context: str | None = None
    kubeconfig: str | None = None
    api: str | None = Field(None, description="trainjob or pytorchjob; None: find whichever has the name.")
    uid: str | None = None
    apply: str | None = Field(None, description="What the server-side apply did: created, updated, unchanged.")
    dry_run: bool = False
    pvc: str | None = None
    pvc_mount_path: str | None = None
    driver_dir: str | None = Field(
        None, description="With trainctl's own retries: the retry driver's folder on this machine (driven.py)."
    )
    driver_pid: int | None = None

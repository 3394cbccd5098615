"""Knobs only the Kubernetes (Kubeflow PyTorchJob) target has."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field

from .base import Section


class KubernetesSection(Section):
    """Where and how the PyTorchJob's pods are placed."""

    namespace: str = "default"
    context: str | None = Field(None, description="kubeconfig context; default: the current one.")
    use_master: bool = Field(False, description="Render a Master replica (1) plus Workers (nodes - 1).")
    queue: str | None = Field(None, description="Kueue LocalQueue name (label) / Volcano queue.")
    priority_class: str | None = None
    scheduler_name: str | None = Field(None, description='e.g. "volcano" for gang scheduling.')
    node_selector: dict[str, str] = Field(default_factory=dict)
    tolerations: list[dict[str, Any]] = Field(default_factory=list)
    affinity: dict[str, Any] | None = None
    service_account: str | None = "trainctl-trainer"
    image_pull_secrets: list[str] = Field(default_factory=list)
    labels: dict[str, str] = Field(default_factory=dict)
    annotations: dict[str, str] = Field(default_factory=dict)
    pvc: str | None = Field("trainctl-checkpoints", description="PersistentVolumeClaim for data and checkpoints.")
    pvc_mount_path: str = "/mnt/trainctl"
    shm_size: str = Field("8Gi", description="Size of the in-memory /dev/shm.")
    clean_pod_policy: Literal["None", "Running", "All"] = "None"
    ttl_seconds_after_finished: int | None = Field(86400, ge=0)

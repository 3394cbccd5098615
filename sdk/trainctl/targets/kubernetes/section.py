"""Knobs only the Kubernetes target has (Kubeflow Trainer v2 TrainJob, or Training Operator v1 PyTorchJob),
checked here so a bad value never reaches a cluster."""

from __future__ import annotations

import re
from typing import Any, Literal

from pydantic import Field, field_validator, model_validator

from ...spec.target_section import TargetSection
from ...spec.units import MEMORY_HELP, parse_memory_mib

DNS1123_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
DNS1123_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_LABEL_NAME = re.compile(r"^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$")
_LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")
_TOLERATION_KEYS = frozenset({"key", "operator", "value", "effect", "tolerationSeconds"})


def check_qualified_key(key: str) -> None:
    """A label or annotation key: `[prefix/]name`, prefix a DNS subdomain, name at most 63 characters."""
    prefix, _, name = key.rpartition("/")
    if prefix and (len(prefix) > 253 or not DNS1123_SUBDOMAIN.match(prefix)):
        raise ValueError(f"key {key!r}: the prefix before '/' must be a DNS subdomain (lowercase, digits, '-', '.')")
    if not name or len(name) > 63 or not _LABEL_NAME.match(name):
        raise ValueError(
            f"key {key!r}: the name must be 1-63 characters of letters, digits, '-', '_', '.', "
            "starting and ending with a letter or digit"
        )


def _dns_label(value: str, what: str) -> str:
    if len(value) > 63 or not DNS1123_LABEL.match(value):
        raise ValueError(f"expected a {what}: lowercase letters, digits and '-', at most 63 characters")
    return value


class KubernetesSection(TargetSection):
    """Which Kubeflow API runs the job, and where and how its pods are placed."""

    api: Literal["trainjob", "pytorchjob"] = Field(
        "trainjob", description="trainjob: Kubeflow Trainer v2 (default); pytorchjob: Training Operator v1.9."
    )
    runtime: str | None = Field(
        None,
        description="TrainJob only: the ClusterTrainingRuntime; default trainctl-torch-r0 (k8s/): no in-place restarts, trainctl retries.",
    )
    namespace: str = Field("trainctl", description="Where the job runs; k8s/ sets up this namespace once.")
    context: str | None = Field(None, description="kubeconfig context; default: the current one.")
    use_master: bool | None = Field(
        None, description="PyTorchJob only: a Master replica; default: yes for a fixed multi-node job."
    )
    kueue_queue: str | None = Field(None, description="Kueue LocalQueue (label kueue.x-k8s.io/queue-name).")
    volcano_queue: str | None = Field(None, description="PyTorchJob only: Volcano queue (gang scheduling).")
    priority_class: str | None = None
    scheduler_name: str | None = Field(None, description='e.g. "volcano" for gang scheduling.')
    node_selector: dict[str, str] = Field(default_factory=dict, description="The pods' nodeSelector.")
    tolerations: list[dict[str, Any]] = Field(default_factory=list, description="The pods' tolerations.")
    affinity: dict[str, Any] | None = None
    service_account: str | None = "trainctl-trainer"
    image_pull_secrets: list[str] = Field(default_factory=list, description="Secret names for pulling the image.")
    labels: dict[str, str] = Field(default_factory=dict, description="Added to the job object and its pods.")
    annotations: dict[str, str] = Field(default_factory=dict, description="Added to the job object and its pods.")
    pvc: str | None = Field("trainctl-checkpoints", description="PersistentVolumeClaim for data and checkpoints.")
    pvc_mount_path: str = Field(
        "/mnt/trainctl", description="Where the PVC is mounted; relative data paths are read under it."
    )
    shm_size: str = Field("8Gi", description="Size of the in-memory /dev/shm.")
    clean_pod_policy: Literal["None", "Running", "All"] = "None"
    ttl_seconds_after_finished: int | None = Field(86400, ge=0)

    @field_validator("namespace")
    @classmethod
    def _namespace(cls, value: str) -> str:
        return _dns_label(value, "namespace name (DNS-1123 label)")

    @model_validator(mode="before")
    @classmethod
    def _queue_was_split(cls, data: Any) -> Any:
        if isinstance(data, dict) and "queue" in data:
            raise ValueError(
                "queue was split in two: kueue_queue (the Kueue LocalQueue label, TrainJob and PyTorchJob) "
                "or volcano_queue (a Volcano queue, PyTorchJob only)"
            )
        return data

    @field_validator(
        "kueue_queue", "volcano_queue", "runtime", "priority_class", "scheduler_name", "service_account", "pvc"
    )
    @classmethod
    def _object_name(cls, value: str | None) -> str | None:
        if value is not None and (len(value) > 253 or not DNS1123_SUBDOMAIN.match(value)):
            raise ValueError("expected a Kubernetes object name: lowercase letters, digits, '-' and '.'")
        return value

    @field_validator("image_pull_secrets")
    @classmethod
    def _pull_secrets(cls, value: list[str]) -> list[str]:
        for name in value:
            if len(name) > 253 or not DNS1123_SUBDOMAIN.match(name):
                raise ValueError(f"{name!r} is not a Secret name: lowercase letters, digits, '-' and '.'")
        return value

    @field_validator("labels", "node_selector")
    @classmethod
    def _labels(cls, value: dict[str, str]) -> dict[str, str]:
        for key, item in value.items():
            check_qualified_key(key)
            if len(item) > 63 or not _LABEL_VALUE.match(item):
                raise ValueError(
                    f"value {item!r} of {key!r}: at most 63 letters, digits, '-', '_', '.', "
                    "starting and ending with a letter or digit"
                )
        return value

    @field_validator("annotations")
    @classmethod
    def _annotations(cls, value: dict[str, str]) -> dict[str, str]:
        for key in value:
            check_qualified_key(key)
        return value

    @field_validator("tolerations")
    @classmethod
    def _tolerations(cls, value: list[dict[str, Any]]) -> list[dict[str, Any]]:
        for i, item in enumerate(value):
            unknown = sorted(set(item) - _TOLERATION_KEYS)
            if unknown:
                raise ValueError(
                    f"toleration [{i}]: unknown key(s) {', '.join(unknown)}; known: {', '.join(sorted(_TOLERATION_KEYS))}"
                )
            if item.get("operator", "Equal") not in ("Equal", "Exists"):
                raise ValueError(f"toleration [{i}]: operator must be Equal or Exists")
            if item.get("effect") not in (None, "", "NoSchedule", "PreferNoSchedule", "NoExecute"):
                raise ValueError(f"toleration [{i}]: effect must be NoSchedule, PreferNoSchedule or NoExecute")
        return value

    @field_validator("pvc_mount_path")
    @classmethod
    def _mount_path(cls, value: str) -> str:
        if not value.startswith("/") or value.rstrip("/") in ("", "/dev", "/tmp", "/proc", "/sys"):
            raise ValueError("expected an absolute path that is not /, /dev, /tmp, /proc or /sys")
        return value.rstrip("/")

    @field_validator("shm_size")
    @classmethod
    def _shm(cls, value: str) -> str:
        try:
            parse_memory_mib(value)
        except ValueError:
            raise ValueError(f"expected {MEMORY_HELP}") from None
        return value

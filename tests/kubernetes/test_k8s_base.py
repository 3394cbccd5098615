"""k8s/: `kubectl kustomize k8s/` renders, each object passes strict Kubernetes validation, and its names
are the defaults the rendered PyTorchJob refers to (namespace, service account, PVC)."""

from __future__ import annotations

import shutil
import subprocess

import kubernetes_validate
import pytest
import yaml
from k8s_testlib import KUBE_VERSION, REPO
from trainctl.targets.kubernetes.section import KubernetesSection


@pytest.fixture(scope="module")
def objects() -> list[dict]:
    kubectl = shutil.which("kubectl")
    if kubectl is None:
        pytest.skip("kubectl not on PATH (needed for `kubectl kustomize k8s/`)")
    out = subprocess.run([kubectl, "kustomize", str(REPO / "k8s")], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    return [d for d in yaml.safe_load_all(out.stdout) if d]


def test_kustomize_renders_valid_objects(objects: list[dict]) -> None:
    kinds = sorted(o["kind"] for o in objects)
    assert kinds == [
        *["ClusterTrainingRuntime"] * 4, "Namespace", "PersistentVolumeClaim", "Role", "Role", "RoleBinding",
        "ServiceAccount",
    ]  # fmt: skip
    for obj in objects:
        if obj["kind"] != "ClusterTrainingRuntime":  # a CRD's kind: validated on kapi (test_runtime.py)
            kubernetes_validate.validate(obj, KUBE_VERSION, strict=True)


def test_names_match_the_section_defaults(objects: list[dict]) -> None:
    sec = KubernetesSection()
    by_kind = {o["kind"]: o for o in objects}
    assert by_kind["Namespace"]["metadata"]["name"] == sec.namespace
    assert by_kind["ServiceAccount"]["metadata"]["name"] == sec.service_account
    assert by_kind["PersistentVolumeClaim"]["metadata"]["name"] == sec.pvc
    cluster_scoped = ("Namespace", "ClusterTrainingRuntime")
    assert all(o["metadata"].get("namespace") == sec.namespace for o in objects if o["kind"] not in cluster_scoped)
    assert all("namespace" not in o["metadata"] for o in objects if o["kind"] in cluster_scoped)
    assert by_kind["PersistentVolumeClaim"]["spec"]["accessModes"] == ["ReadWriteMany"]


def test_rbac_is_minimal(objects: list[dict]) -> None:
    roles = {o["metadata"]["name"]: o for o in objects if o["kind"] == "Role"}
    trainer = roles["trainctl-trainer"]["rules"]
    assert trainer == [{"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list", "watch"]}]
    for role in roles.values():
        for rule in role["rules"]:
            assert "*" not in rule["verbs"] and "*" not in rule["resources"]
            assert not {"secrets", "update"} & (set(rule["resources"]) | set(rule["verbs"]))

"""k8s/: `kubectl kustomize k8s/` renders, each object passes strict Kubernetes validation, and its names
are the defaults the rendered PyTorchJob refers to (namespace, service account, PVC)."""

from __future__ import annotations

import ast
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
        "ClusterRole", "ClusterRoleBinding", *["ClusterTrainingRuntime"] * 4, "Deployment", "Namespace",
        "PersistentVolumeClaim", "Role", "Role", "Role", "RoleBinding", "RoleBinding", "ServiceAccount",
        "ServiceAccount",
    ]  # fmt: skip
    for obj in objects:
        if obj["kind"] != "ClusterTrainingRuntime":  # a CRD's kind: validated on kapi (test_runtime.py)
            kubernetes_validate.validate(obj, KUBE_VERSION, strict=True)


def test_names_match_the_section_defaults(objects: list[dict]) -> None:
    sec = KubernetesSection()
    by_kind = {o["kind"]: o for o in objects}
    accounts = {o["metadata"]["name"] for o in objects if o["kind"] == "ServiceAccount"}
    assert by_kind["Namespace"]["metadata"]["name"] == sec.namespace
    assert accounts == {sec.service_account, "trainctl-controller"}
    assert by_kind["PersistentVolumeClaim"]["metadata"]["name"] == sec.pvc
    cluster_scoped = ("Namespace", "ClusterTrainingRuntime", "ClusterRole", "ClusterRoleBinding")
    assert all(o["metadata"].get("namespace") == sec.namespace for o in objects if o["kind"] not in cluster_scoped)
    assert all("namespace" not in o["metadata"] for o in objects if o["kind"] in cluster_scoped)
    assert by_kind["PersistentVolumeClaim"]["spec"]["accessModes"] == ["ReadWriteMany"]


def test_rbac_is_minimal(objects: list[dict]) -> None:
    roles = {o["metadata"]["name"]: o for o in objects if o["kind"] in ("Role", "ClusterRole")}
    trainer = roles["trainctl-trainer"]["rules"]
    assert trainer == [{"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list", "watch"]}]
    for role in roles.values():
        for rule in role["rules"]:
            assert "*" not in rule["verbs"] and "*" not in rule["resources"] and "secrets" not in rule["resources"]
            if "update" in rule["verbs"]:  # only the controller's own lock, by name
                assert rule["resources"] == ["configmaps"] and rule["resourceNames"] == ["trainctl-controller"], rule


CONTROLLER_MODULES = ("controller.py", "reconcile.py")
LIBRARY_CALLS = {
    ("get", "configmaps"), ("create", "configmaps"), ("update", "configmaps"),  # kubernetes.leaderelection ConfigMapLock
    ("watch", "pods"),  # reconcile.PodMemory: watch.Watch().stream over the pod list
}  # fmt: skip


def _calls(tree: ast.AST, resources: dict[str, list[str]]) -> set[tuple[str, str]]:
    """(verb, resource) of every `….call(…, verb=…, resource=…)` (Cluster.call: every API call names both)."""
    found: set[tuple[str, str]] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "call":
            kw = {k.arg: k.value for k in node.keywords}
            if "verb" in kw and "resource" in kw:
                verb = ast.literal_eval(kw["verb"])
                res = kw["resource"]
                names = [ast.literal_eval(res)] if isinstance(res, ast.Constant) else resources[ast.unparse(res)]
                found |= {(verb, r) for r in names}
    return found


def test_the_controllers_rbac_grants_every_call_it_makes(objects: list[dict]) -> None:
    """Every API call in the modules the controller runs (and objects.get_job, which it calls), read from their
    source, is granted by its ClusterRole or its lock's Role: the test API server has no RBAC to refuse one."""
    from trainctl.targets.kubernetes.kinds import KINDS

    resources = {"kind.resource": [k.resource for k in KINDS.values()]}
    base = REPO / "sdk" / "trainctl" / "targets" / "kubernetes"
    calls = set(LIBRARY_CALLS)
    for name in CONTROLLER_MODULES:
        calls |= _calls(ast.parse((base / name).read_text()), resources)
    objects_py = ast.parse((base / "objects.py").read_text())
    (get_job,) = [n for n in ast.walk(objects_py) if isinstance(n, ast.FunctionDef) and n.name == "get_job"]
    calls |= _calls(get_job, resources)
    granted: set[tuple[str, str]] = set()
    for o in objects:
        if o["kind"] in ("ClusterRole", "Role") and o["metadata"]["name"].startswith("trainctl-controller"):
            for rule in o["rules"]:
                for group in rule["apiGroups"]:
                    granted |= {
                        (v, r if not group else f"{r}.{group}") for r in rule["resources"] for v in rule["verbs"]
                    }
    assert ("create", "trainjobs.trainer.kubeflow.org") in calls and ("patch", "pytorchjobs.kubeflow.org") in calls
    assert calls <= granted, sorted(calls - granted)
    assert granted <= calls, sorted(granted - calls)  # minimal: nothing it never asks for


def test_the_controller_pod_is_restricted(objects: list[dict]) -> None:
    from port_pss import violations

    (deployment,) = [o for o in objects if o["kind"] == "Deployment"]
    spec = deployment["spec"]["template"]["spec"]
    assert violations(spec) == [] and spec["serviceAccountName"] == "trainctl-controller"
    assert deployment["spec"]["replicas"] == 2  # one leads, one waits (controller.py)
    from trainctl.version import __version__

    (container,) = spec["containers"]
    assert container["image"] == f"ghcr.io/trainctl/controller:{__version__}"  # image.yml pushes it on tags
    assert container["command"] == ["trainctl-controller"]

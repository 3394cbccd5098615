"""PyTorchJob under the Training Operator v1.9.4 port, without training: the env every shape's pods get
and what the launcher makes of it (issue 13 bug 1), the Master's init container against Pod Security
"restricted" (bug 2), and `retries` enforced by the operator's backoff counting (bug 3)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from typing import Any

import pytest
from k8s_testlib import REPO, Operators
from port_pss import violations
from port_pytorchjob import pod_for, set_defaults
from trainctl import Job
from trainctl.targets.kubernetes import engine
from trainctl.targets.kubernetes.render import build_manifest

INIT_TEMPLATE = (REPO / "k8s" / "pytorchjob" / "init-container.yaml").read_text()


def _manifest(nodes: int, procs: int = 2, **more: Any) -> dict[str, Any]:
    job = Job.from_yaml(REPO / "examples" / "digits.yaml")
    sets = ["kubernetes.api=pytorchjob", f"resources.nodes={nodes}", f"resources.procs_per_node={procs}"]
    return set_defaults(engine.build_manifest(job.with_overrides(sets + [f"{k}={v}" for k, v in more.items()])))


def _plan(pod: dict[str, Any]) -> dict[str, Any]:
    """The launcher's plan (--dry-run) in this pod's environment, as the operator wrote it."""
    env = {e["name"]: e["value"] for e in pod["spec"]["containers"][0]["env"] if "value" in e}
    env |= {"PATH": os.environ["PATH"], "PYTHONPATH": str(REPO / "trainer_image")}
    argv = [sys.executable, "-m", "trainer.launch", "--nproc-per-node", "2", "--dry-run", "--", "python", "-c", "pass"]
    done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    plan: dict[str, Any] = json.loads(done.stdout)
    return plan


@pytest.mark.parametrize(
    ("nodes", "more", "pods"),
    [
        (1, {}, [("Worker", 0)]),
        (2, {}, [("Master", 0), ("Worker", 0)]),
        (3, {}, [("Master", 0), ("Worker", 0), ("Worker", 1)]),
        (3, {"resources.elastic.min_nodes": 1, "resources.elastic.max_nodes": 3}, [("Worker", i) for i in range(3)]),
    ],
    ids=["1-node", "master-worker", "master-2-workers", "elastic-1-3"],
)
def test_every_shape_gets_a_rank_and_a_rendezvous(nodes: int, more: dict[str, Any], pods: list[Any]) -> None:
    job = _manifest(nodes, **more)
    assert [(t, i) for t, r in job["spec"]["pytorchReplicaSpecs"].items() for i in range(r["replicas"])] == pods
    plans = [_plan(pod_for(job, t, i)) for t, i in pods]
    if nodes == 1:
        assert plans[0]["standalone"] is True
    elif "elasticPolicy" in job["spec"]:
        assert {p["rdzv_endpoint"] for p in plans} == {f"{job['metadata']['name']}-worker-0:23456"}
        assert {p["nnodes"] for p in plans} == {"1:3"} and {p["rdzv_backend"] for p in plans} == {"c10d"}
    else:
        assert {p["master_addr"] for p in plans} == {"digits-master-0"}
        assert sorted(p["node_rank"] for p in plans) == list(range(nodes))
        assert {p["nnodes"] for p in plans} == {str(nodes)}


def test_the_masters_init_container_against_pod_security_restricted() -> None:
    job = _manifest(2)
    master, worker = pod_for(job, "Master", 0), pod_for(job, "Worker", 0)
    assert master["spec"]["initContainers"] == [] and violations(master["spec"]) == []
    (init,) = worker["spec"]["initContainers"]
    found = violations(worker["spec"])
    assert found and all("'init-pytorch'" in v for v in found), found  # the built-in template is refused
    ok = pod_for(job, "Worker", 0, init_template=INIT_TEMPLATE)
    assert violations(ok["spec"]) == []  # k8s/pytorchjob/init-container.yaml passes
    (init,) = ok["spec"]["initContainers"]
    assert "nslookup digits-master-0" in init["command"][2]
    assert init["resources"]["requests"] == init["resources"]["limits"]


@pytest.mark.kapi
def test_retries_two_means_three_runs_then_failed(operators: Operators) -> None:
    """The port's in-place restarts (`restartPolicy: OnFailure`, `backoffLimit`), on a PyTorchJob a user wrote
    that way: trainctl renders `Never` and retries with new objects (attempts.py)."""
    job = Job.parse(
        {"name": "crashy", "command": ["python", "-c", "import sys; print('run'); sys.exit(1)"],
         "kubernetes": {"api": "pytorchjob", "namespace": operators.ns, "pvc": None}}
    )  # fmt: skip
    manifest = build_manifest(job)
    manifest["spec"]["runPolicy"]["backoffLimit"] = 3
    for replica in manifest["spec"]["pytorchReplicaSpecs"].values():
        replica["restartPolicy"] = "OnFailure"
    operators.cluster.custom.create_namespaced_custom_object(
        "kubeflow.org", "v1", operators.ns, "pytorchjobs", manifest, field_validation="Strict"
    )
    final, ctl = operators.run("pytorchjob", "crashy", timeout=120)
    cond = final["status"]["conditions"][-1]
    assert (cond["type"], cond["reason"]) == ("Failed", "BackoffLimitExceeded")
    # runs 1, 2 and 3 failed; the kubelet began a fourth, whose restart count (3) crosses backoffLimit 3
    assert ctl.restarts == 3

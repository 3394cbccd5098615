"""k8s/trainingruntimes.yaml: trainctl's ClusterTrainingRuntimes pass strict server-side validation
against the Trainer v2.3.0 CRD, every pod they make passes Pod Security "restricted", and their JobSet
failure policy (run by the JobSet port) gives `retries: N` exactly N more attempts and fails exit 2 at once."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml
from k8s_testlib import REPO
from port_pss import violations
from port_trainer import build_jobset

RUNTIMES = REPO / "k8s" / "trainingruntimes.yaml"


def runtimes() -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(RUNTIMES.read_text()) if d]


def _trainjob(name: str, runtime: str, command: list[str], nodes: int = 1) -> dict[str, Any]:
    return {
        "apiVersion": "trainer.kubeflow.org/v1alpha1",
        "kind": "TrainJob",
        "metadata": {"name": name, "namespace": "rt"},
        "spec": {
            "runtimeRef": {"name": runtime},
            "trainer": {"numNodes": nodes, "numProcPerNode": 1, "command": command,
                        "resourcesPerNode": {"requests": {"cpu": "1"}, "limits": {"cpu": "1"}}},
        },
    }  # fmt: skip


def test_one_runtime_per_retry_count_differing_only_in_name_and_restarts() -> None:
    docs = runtimes()
    assert [d["metadata"]["name"] for d in docs] == [f"trainctl-torch-r{n}" for n in range(4)]
    base = copy.deepcopy(docs[0])
    for n, doc in enumerate(docs):
        assert doc["spec"]["template"]["spec"]["failurePolicy"]["maxRestarts"] == n
        doc = copy.deepcopy(doc)
        doc["metadata"]["name"] = base["metadata"]["name"]
        doc["spec"]["template"]["spec"]["failurePolicy"]["maxRestarts"] = 0
        assert doc == base


def test_runtime_pods_pass_pod_security_restricted() -> None:
    for rt in runtimes():
        js = build_jobset(_trainjob("x", rt["metadata"]["name"], ["true"], nodes=2), rt)
        for rjob in js["spec"]["replicatedJobs"]:
            assert violations(rjob["template"]["spec"]["template"]["spec"]) == []


def test_pss_port_rejects_what_restricted_rejects() -> None:
    spec = runtimes()[0]["spec"]["template"]["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]
    bad = copy.deepcopy(spec)
    bad["containers"][0]["securityContext"].pop("allowPrivilegeEscalation")
    bad["volumes"].append({"name": "h", "hostPath": {"path": "/"}})
    bad["securityContext"].pop("runAsNonRoot")
    bad["containers"][0]["securityContext"].pop("runAsNonRoot")
    found = "\n".join(violations(bad))
    assert "allowPrivilegeEscalation" in found and "hostPath" in found and "runAsNonRoot" in found


@pytest.mark.kapi
def test_runtimes_pass_strict_server_side_validation(kapi: Path) -> None:
    from kubernetes import client, config

    api = config.new_client_from_config(config_file=str(kapi))
    custom = client.CustomObjectsApi(api)
    for rt in runtimes():
        rt["metadata"]["name"] += "-dry"  # the `cluster` fixture may have installed the real ones already
        custom.create_cluster_custom_object(
            "trainer.kubeflow.org", "v1alpha1", "clustertrainingruntimes", rt, dry_run="All", field_validation="Strict"
        )


def _fail_with(code: int) -> list[str]:
    return ["python", "-c", f"import sys; print('attempt'); sys.exit({code})"]


@pytest.mark.kapi
@pytest.mark.parametrize(("retries", "code", "attempts", "reason"), [
    (2, 1, 3, "ReachedMaxRestarts"),
    (0, 137, 1, "ReachedMaxRestarts"),
    (3, 2, 1, "FailJobSetFailurePolicyAction"),
])  # fmt: skip
def test_retries_are_restarts_and_exit_2_fails_at_once(
    operators: Any, retries: int, code: int, attempts: int, reason: str
) -> None:
    tj = _trainjob(f"fail-{retries}-{code}", f"trainctl-torch-r{retries}", _fail_with(code))
    final, ctl = operators.run_trainjob(tj, timeout=120)
    (cond,) = final["status"]["conditions"]
    assert (cond["type"], cond["reason"]) == ("Failed", reason)
    assert ctl.controller.restarts == attempts - 1
    # jobset_controller.go Reconcile deletes a finished JobSet's active Jobs only: the failed attempt's pod
    # stays, with its exit code (what `trainctl logs` and `status` read); earlier attempts' pods are deleted.
    (pod,) = operators.cluster.core.list_namespaced_pod(operators.ns).items
    assert pod.metadata.labels["jobset.sigs.k8s.io/restart-attempt"] == str(attempts - 1)
    assert pod.status.phase == "Failed" and pod.status.container_statuses[0].state.terminated.exit_code == code

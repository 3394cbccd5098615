"""A 1,024-node run on the real API server (issue 39): the record of its attempts, which the run's object keeps
as annotations, and a retry that keeps off 100 blamed nodes, are objects kube-apiserver accepts.

The limit that matters is the API server's: an object's annotations hold 256 KiB in all (apimachinery
pkg/api/validation/objectmeta.go `TotalAnnotationSizeLimitB`, `ValidateAnnotations`), which the test API
server enforces for custom resources as for every object (checked first, so the test can fail)."""

from __future__ import annotations

import json
from typing import Any

import pytest
from k8s_testlib import REPO, Cluster
from kubernetes.client.exceptions import ApiException
from trainctl import Job
from trainctl.runs.causes import Cause
from trainctl.runs.state import Attempt
from trainctl.targets.kubernetes import causes
from trainctl.targets.kubernetes.attempts import ATTEMPTS, record_of
from trainctl.targets.kubernetes.cluster import connect
from trainctl.targets.kubernetes.kinds import TRAINJOB
from trainctl.targets.kubernetes.reconcile import Runs
from trainctl.targets.kubernetes.render import build_manifest

NODES, ATTEMPTS_MADE, LOST_PER_ATTEMPT = 1024, 20, 5
LIMIT = 256 * 1024  # apimachinery TotalAnnotationSizeLimitB


def _node(i: int) -> str:
    """An EKS node's name: 43 characters, as long as they come in practice."""
    return f"ip-10-{i // 250:03d}-{i % 250:03d}-{i % 7 + 100:03d}.us-west-2.compute.internal"


def _pods(nodes: list[str], lost: set[str]) -> list[dict[str, Any]]:
    """An attempt's pods at its end: the lost nodes' pods NodeLost, the rest torn down (143)."""
    ended = {"containerStatuses": [{"state": {"terminated": {"exitCode": 143, "reason": "Error"}}}]}
    return [{"spec": {"nodeName": n}, "status": {"reason": "NodeLost"} if n in lost else ended} for n in nodes]


def _annotations_size(obj: dict[str, Any]) -> int:
    notes = obj["metadata"].get("annotations") or {}
    return sum(len(k) + len(v.encode()) for k, v in notes.items())


@pytest.fixture
def namespace(cluster: Cluster) -> str:
    name = "scale-records"
    try:
        cluster.core.create_namespace({"metadata": {"name": name}})
    except ApiException as exc:
        if exc.status != 409:
            raise
    return name


def test_twenty_attempts_of_1024_nodes_are_recorded_and_the_retry_avoids_100(cluster: Cluster, namespace: str) -> None:
    custom, kind = cluster.custom, TRAINJOB
    job = Job.from_yaml(REPO / "examples" / "digits.yaml").with_overrides(
        ["name=big", "retries=25", f"resources.nodes={NODES}", "kubernetes.pvc=trainctl-checkpoints"]
    )
    manifest = build_manifest(job, "big-ab12")
    manifest["metadata"]["namespace"] = namespace
    custom.create_namespaced_custom_object(
        kind.group, kind.version, namespace, kind.plural, manifest, field_validation="Strict"
    )

    def get() -> dict[str, Any]:
        return dict(custom.get_namespaced_custom_object(kind.group, kind.version, namespace, kind.plural, "big-ab12"))

    with pytest.raises(
        ApiException, match=r"metadata\.annotations: Too long: may not be more than 262144 bytes"
    ):  # the limit is enforced
        custom.patch_namespaced_custom_object(kind.group, kind.version, namespace, kind.plural, "big-ab12",
                                              {"metadata": {"annotations": {"x": "y" * LIMIT}}})  # fmt: skip
    runs = Runs(connect(None, namespace, str(cluster.kubeconfig)), None, lambda _: None)
    pool, ended = [_node(i) for i in range(NODES + ATTEMPTS_MADE * LOST_PER_ATTEMPT)], []
    for number in range(1, ATTEMPTS_MADE + 1):
        avoid = set(causes.avoided(ended))
        nodes = [n for n in pool if n not in avoid][:NODES]
        lost = set(nodes[number * 37 % NODES :][:LOST_PER_ATTEMPT])
        attempt = causes.attempt_of(number, f"{namespace}/big-ab12-a{number}", _pods(nodes, lost))
        assert (attempt.cause, sorted(attempt.blamed_nodes)) == (Cause.NODE_LOST, sorted(lost))
        assert runs._record(runs.cluster, kind, get(), [*ended, attempt], None)  # the driver's own patch
        ended.append(attempt)

    run = get()
    record = record_of(run)
    assert [a.number for a in record.ended] == list(range(1, ATTEMPTS_MADE + 1))
    assert record.ended[0].nodes == f"{','.join(pool[:16])} and {NODES - 16} more ({NODES} nodes)"
    assert _annotations_size(run) < LIMIT // 4, _annotations_size(run)  # room for more attempts than retries allow
    avoid = causes.avoided(record.ended)
    assert len(avoid) == ATTEMPTS_MADE * LOST_PER_ATTEMPT == 100

    runs._create(runs.cluster, kind, run, record, ATTEMPTS_MADE + 1)  # the retry, as the driver creates it
    retry = custom.get_namespaced_custom_object(kind.group, kind.version, namespace, kind.plural, "big-ab12-a21")
    patch = retry["spec"]["runtimePatches"][0]["trainingRuntimeSpec"]["template"]["spec"]["replicatedJobs"][0]
    terms = patch["template"]["spec"]["template"]["spec"]["affinity"]["nodeAffinity"][
        "requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]  # fmt: skip
    assert terms == [{"matchExpressions": [{"key": "kubernetes.io/hostname", "operator": "NotIn",
                                            "values": sorted(avoid)}]}]  # fmt: skip
    assert retry["spec"]["trainer"]["numNodes"] == NODES


def test_the_whole_node_list_of_six_attempts_would_not_fit() -> None:
    """Why the record names 16 nodes and counts the rest: the whole list of 1,024 names, six times over,
    passes the API server's limit."""
    whole = ",".join(_node(i) for i in range(NODES))
    attempts = [Attempt(number=n, engine_id="x", nodes=whole).model_dump(mode="json", exclude_none=True)
                for n in range(1, 7)]  # fmt: skip
    assert len(json.dumps(attempts)) + len(ATTEMPTS) > LIMIT
    said = causes.nodes_said([_node(i) for i in range(NODES)])
    assert said is not None and len(said) < 1000 and said.endswith("and 1008 more (1024 nodes)")
    assert causes.nodes_said(["n1", "n2"]) == "n1,n2" and causes.nodes_said([]) is None

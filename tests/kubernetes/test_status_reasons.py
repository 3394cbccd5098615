"""`trainctl status` for a job that has not started says why, from the objects' own conditions and events:
Kueue admission pending, unschedulable (the scheduler's message), image pull failing, quota."""

from __future__ import annotations

import json
from typing import Any

import pytest
from k8s_testlib import REPO, Operators
from trainctl import Job, RunState
from trainctl.targets.kubernetes import engine as k8s
from trainctl.targets.kubernetes.kinds import PYTORCHJOB, TRAINJOB
from trainctl.targets.kubernetes.status import job_status, why_not_started

TRAINJOB_OBJ = {"metadata": {"name": "j", "labels": {"kueue.x-k8s.io/queue-name": "team-a"}}, "spec": {}}


def _pod(**status: Any) -> dict[str, Any]:
    return {"metadata": {"name": "j-node-0-0-abcde"}, "status": {"phase": "Pending", **status}}


def test_unschedulable_says_the_schedulers_message() -> None:
    msg = "0/3 nodes are available: 3 Insufficient nvidia.com/gpu. preemption: 0/3 nodes are available"
    pod = _pod(conditions=[{"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": msg}])
    st = job_status(TRAINJOB, TRAINJOB_OBJ, {"node-0": "Pending"}, why_not_started(TRAINJOB_OBJ, [pod], []))
    assert (st.state, st.native_state) == (RunState.QUEUED, "Pending") and st.reason == f"unschedulable: {msg}"


def test_image_pull_failing_names_the_image() -> None:
    waiting = {"reason": "ImagePullBackOff", "message": 'Back-off pulling image "ghcr.io/x/trainer:nope"'}
    pod = _pod(containerStatuses=[{"name": "node", "image": "ghcr.io/x/trainer:nope", "state": {"waiting": waiting}}])
    why = why_not_started(TRAINJOB_OBJ, [pod], [])
    assert why is not None and why.startswith("image pull failing (ImagePullBackOff) for ghcr.io/x/trainer:nope")


def test_quota_from_failed_create_events() -> None:
    ev = {"reason": "FailedCreate", "message": 'pods "j-node-0-0" is forbidden: exceeded quota: gpu, requested: '
          "nvidia.com/gpu=8, used: nvidia.com/gpu=8, limited: nvidia.com/gpu=8"}  # fmt: skip
    assert why_not_started(TRAINJOB_OBJ, [], [ev]) == f"quota: {ev['message']}"


def test_nothing_said_is_none_and_the_default_reason_stays() -> None:
    assert why_not_started(TRAINJOB_OBJ, [_pod()], []) is None
    st = job_status(PYTORCHJOB, {"metadata": {"name": "j"}, "spec": {}}, {})
    assert st.reason == "no conditions yet: the training operator has not picked the job up"


@pytest.mark.kapi
def test_kueue_holding_a_trainjob_through_the_api(operators: Operators) -> None:
    job = Job.from_yaml(REPO / "examples" / "digits.yaml").with_overrides(
        [f"kubernetes.namespace={operators.ns}", "kubernetes.kueue_queue=team-a"]
    )
    run = k8s.submit(job, kubeconfig=str(operators.cluster.kubeconfig), apply=True)
    c = operators.cluster
    # What Kueue does to a TrainJob it has not admitted: suspends it, and says why in an event.
    c.custom.patch_namespaced_custom_object(
        "trainer.kubeflow.org", "v1alpha1", operators.ns, "trainjobs", "digits", {"spec": {"suspend": True}}
    )
    c.core.create_namespaced_event(operators.ns, {
        "metadata": {"name": "digits.kueue"},
        "involvedObject": {"kind": "TrainJob", "name": "digits", "namespace": operators.ns},
        "reason": "Pending", "type": "Normal", "source": {"component": "kueue-admission"},
        "message": "couldn't assign flavors to pod set node: insufficient unused quota for cpu in flavor default",
    })  # fmt: skip
    st = k8s.status(run)
    assert st.state is RunState.QUEUED
    assert st.reason == (
        "waiting for Kueue admission in LocalQueue 'team-a': couldn't assign flavors to pod set node: "
        "insufficient unused quota for cpu in flavor default"
    )


def _ran(name: str, container: str, image_id: str, state: str = "terminated") -> dict[str, Any]:
    cs = {"name": container, "image": "localhost/trainctl-trainer:0.1.0-cpu", "imageID": image_id, "state": {state: {}}}
    return {"metadata": {"name": name}, "status": {"phase": "Running", "containerStatuses": [cs]}}


def test_status_reads_each_pods_image_id_and_warns_when_they_differ() -> None:
    """The kubelet's `containerStatuses[].imageID` of the kind's container (TrainJob `node`, PyTorchJob
    `pytorch`); a waiting container without one is not counted; two images in one job is a warning."""
    from trainctl.targets.kubernetes.status import pod_image_ids

    a, b = "sha256:" + "a" * 64, "sha256:" + "b" * 64
    done = {"metadata": {"name": "j"}, "status": {"conditions": [{"type": "Complete", "status": "True"}]}}
    pods = [_ran("j-node-0-0", "node", a), _ran("j-node-0-1", "node", a), _ran("j-node-0-2", "node", "", "waiting")]
    ids = pod_image_ids(pods, TRAINJOB.container)
    assert ids == {"j-node-0-0": a, "j-node-0-1": a}
    st = job_status(TRAINJOB, done, {"node-0": "Succeeded", "node-1": "Succeeded"}, None, ids)
    assert st.images.same == a and st.images.warning is None

    pods = [_ran("j-master-0", "pytorch", a), _ran("j-worker-0", "pytorch", b), _ran("j-worker-1", "sidecar", a)]
    ids = pod_image_ids(pods, PYTORCHJOB.container)
    assert ids == {"j-master-0": a, "j-worker-0": b}
    st = job_status(PYTORCHJOB, {"metadata": {"name": "j"}, "status": {}}, {"Master-0": "Running"}, None, ids)
    assert "2 different images" in st.images.warning and "j-worker-0" in st.images.warning
    # process pods (no image): the kubelet's imageID is empty, and status says none was reported
    st = job_status(TRAINJOB, done, {}, None, pod_image_ids([_ran("p", "node", "")], "node"))
    assert st.images.ids == {"p": ""} and (st.images is None or st.images.same is None)


@pytest.mark.kapi
def test_pods_of_one_pytorchjob_that_ran_two_images_are_a_warning_in_both_status_commands(
    operators: Operators, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two kubelets that resolved the job's tag to different images (the tag moved between two pulls): the
    pods' `containerStatuses[].imageID` differ, and `trainctl status` / `trainctl k8s status` say so."""
    from run_cli import cli  # tests/support

    monkeypatch.setenv("KUBECONFIG", str(operators.cluster.kubeconfig))
    ns, core = operators.ns, operators.cluster.core
    done = cli("k8s", "apply", str(REPO / "examples" / "digits.yaml"), "-n", ns,
               "--set", "kubernetes.api=pytorchjob", "--set", "resources.nodes=2")  # fmt: skip
    assert done.exit_code == 0, done.stderr
    a, b = "sha256:" + "a" * 64, "sha256:" + "b" * 64
    for name, rtype, image_id in (("digits-master-0", "master", a), ("digits-worker-0", "worker", b)):
        labels = {"training.kubeflow.org/job-name": "digits", "training.kubeflow.org/replica-type": rtype,
                  "training.kubeflow.org/replica-index": "0"}  # fmt: skip
        pod = {"metadata": {"name": name, "labels": labels},
               "spec": {"containers": [{"name": "pytorch", "image": "ghcr.io/x/trainer:1"}]}}  # fmt: skip
        core.create_namespaced_pod(ns, pod)
        cs = {"name": "pytorch", "image": "ghcr.io/x/trainer:1", "imageID": image_id, "ready": True,
              "restartCount": 0, "state": {"running": {"startedAt": "2026-11-22T00:00:00Z"}}}  # fmt: skip
        core.patch_namespaced_pod(name, ns, {"status": {"phase": "Running", "containerStatuses": [cs]}})
    out = cli("k8s", "status", "digits", "-n", ns).stdout.splitlines()
    assert f"  image ID of digits-master-0: {a}" in out and f"  image ID of digits-worker-0: {b}" in out, out
    warning = [line for line in out if line.startswith("  WARNING: the pods of this run ran 2 different images")]
    assert len(warning) == 1 and "on digits-master-0" in warning[0] and "on digits-worker-0" in warning[0], out
    generic = cli("status", f"kubernetes:{ns}/digits")
    assert generic.exit_code == 0 and warning[0] in generic.stdout.splitlines(), generic.stdout
    as_json = cli("status", f"kubernetes:{ns}/digits", "--output", "json")
    images = json.loads(as_json.stdout)["images"]
    assert images["ids"] == {"digits-master-0": a, "digits-worker-0": b} and "same" not in images

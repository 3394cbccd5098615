"""`trainctl status` for a job that has not started says why, from the objects' own conditions and events:
Kueue admission pending, unschedulable (the scheduler's message), image pull failing, quota."""

from __future__ import annotations

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
    run = k8s.submit(job, kubeconfig=str(operators.cluster.kubeconfig))
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

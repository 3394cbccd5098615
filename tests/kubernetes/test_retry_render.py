"""A retry's manifest leaves the blamed nodes out (issue 24 done-when g, the pure part): the required node
anti-affinity merged into what the user set, for both APIs, valid against the CRDs and strict Pod validation,
and the Kubernetes causes that name the blamed nodes (trainctl/targets/kubernetes/causes.py), table-tested."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from k8s_testlib import REPO, assert_valid, runtimes
from port_scheduler import fake_node, schedule
from port_trainer import build_jobset
from trainctl import Job
from trainctl.runs.causes import Cause
from trainctl.runs.records import failure_line, tail_heading
from trainctl.runs.state import Failure
from trainctl.targets.kubernetes import causes
from trainctl.targets.kubernetes.attempts import ATTEMPT_OF_LABEL, ATTEMPTS, RETRIES_LABEL, next_attempt
from trainctl.targets.kubernetes.render import build_manifest, run_paths
from trainctl.targets.kubernetes.seed import seeded
from trainctl.targets.kubernetes.status import why_not_started
from trainctl.targets.kubernetes.yaml_bytes import manifest_yaml

NOT_IN = {"key": "kubernetes.io/hostname", "operator": "NotIn", "values": ["n1", "n2"]}
ZONES = {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a", "b"]}]}
GPU = {"matchExpressions": [{"key": "gpu", "operator": "Exists"}]}
PREFERRED = [{"weight": 5, "preference": {"matchExpressions": [{"key": "fast", "operator": "Exists"}]}}]
POD_ANTI = {"requiredDuringSchedulingIgnoredDuringExecution": [
    {"labelSelector": {"matchLabels": {"app": "x"}}, "topologyKey": "kubernetes.io/hostname"}]}  # fmt: skip


def _job(api: str, affinity: dict[str, Any] | None = None) -> Job:
    sec: dict[str, Any] = {"api": api, "pvc": "trainctl-checkpoints"}
    if affinity is not None:
        sec["affinity"] = affinity
    job = Job.from_yaml(REPO / "examples" / "digits.yaml")
    return job.with_overrides([f"kubernetes.{k}={v}" for k, v in sec.items() if k != "affinity"]).with_overrides(
        [] if affinity is None else [f"kubernetes.affinity={affinity!r}".replace("'", '"')]
    )


def _pod_specs(manifest: dict[str, Any]) -> list[dict[str, Any]]:
    """The pod specs the manifest's pods get (a TrainJob's through the Trainer port's runtime merge)."""
    if manifest["kind"] == "TrainJob":
        js = build_jobset(copy.deepcopy(manifest), runtimes()[manifest["spec"]["runtimeRef"]["name"]])
        return [r["template"]["spec"]["template"]["spec"] for r in js["spec"]["replicatedJobs"]]
    return [r["template"]["spec"] for r in manifest["spec"]["pytorchReplicaSpecs"].values()]


@pytest.mark.parametrize("api", ["trainjob", "pytorchjob"])
@pytest.mark.parametrize(
    ("affinity", "want"),
    [
        (None, {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
            "nodeSelectorTerms": [{"matchExpressions": [NOT_IN]}]}}}),
        # terms are ORed: the NotIn joins each one, or a node could pass by the other term
        ({"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [ZONES, GPU]},
                           "preferredDuringSchedulingIgnoredDuringExecution": PREFERRED},
          "podAntiAffinity": POD_ANTI},
         {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
             {"matchExpressions": [*ZONES["matchExpressions"], NOT_IN]},
             {"matchExpressions": [*GPU["matchExpressions"], NOT_IN]}]},
             "preferredDuringSchedulingIgnoredDuringExecution": PREFERRED},
          "podAntiAffinity": POD_ANTI}),
    ],
)  # fmt: skip
def test_the_retry_merges_the_anti_affinity_into_the_users(
    api: str, affinity: dict[str, Any] | None, want: dict[str, Any]
) -> None:
    job = _job(api, affinity)
    before = manifest_yaml(build_manifest(job, "digits-ab12"))
    manifest = build_manifest(job, "digits-ab12", ["n2", "n1", "n2"])
    assert manifest_yaml(build_manifest(job, "digits-ab12", ["n2", "n1"])) == manifest_yaml(manifest)  # pure
    assert manifest_yaml(build_manifest(job, "digits-ab12")) == before  # the job itself is untouched
    assert manifest_yaml(build_manifest(job, "digits-ab12", [])) == before
    assert_valid(manifest)
    for spec in _pod_specs(manifest):
        assert spec["affinity"] == want
        pod = {"spec": spec}
        nodes = [fake_node(n) for n in ("n1", "n2", "n3")]
        for node in nodes:
            node["metadata"]["labels"] |= {"zone": "a", "gpu": "1"}
        assert schedule(pod, nodes, {}) == ("n3", "")


def _pod(node: str, code: int | None = None, reason: str = "Error", pod_reason: str | None = None) -> dict[str, Any]:
    status: dict[str, Any] = {"containerStatuses": [{"name": "node", "state": (
        {"running": {}} if code is None else {"terminated": {"exitCode": code, "reason": reason}})}]}  # fmt: skip
    if pod_reason:
        status["reason"] = pod_reason
    return {"spec": {"nodeName": node}, "status": status}


def _said(pod: dict[str, Any], message: str) -> dict[str, Any]:
    """The pod with its container's termination message, as the kubelet copies it into the status."""
    pod["status"]["containerStatuses"][0]["state"]["terminated"]["message"] = message
    return pod


# containerd's message for a container runc would not start (internal/cri/server/container_start.go wraps runc's)
_WRAP = ("failed to create containerd task: failed to create shim task: OCI runtime create failed: runc create "
         "failed: unable to start container process: error during container init: {}: unknown")  # fmt: skip
START_NOT_FOUND = _WRAP.format('exec: "trainer-launch": executable file not found in $PATH')
START_MOUNT = _WRAP.format('error mounting "/data" to rootfs at "/data": no such device')
HANG = {"kind": "hang", "time": 100.0, "exit_code": 200, "suspects": [{"node": "n2", "rank": 1}]}


@pytest.mark.parametrize(
    ("pods", "record", "cause", "blamed", "code"),
    [
        ([_pod("n1", 0), _pod("n2", 0)], None, None, [], None),
        ([_pod("n1", 200), _pod("n2", 143)], HANG, Cause.HANG, ["n2"], 200),
        ([_pod("n1", 143), _pod("n2", 143)], HANG | {"time": 1.0}, Cause.PREEMPTED, [], 143),  # an old record
        ([_pod("n1", 1), _pod("n2", 143)], None, Cause.APPLICATION_ERROR, [], 1),  # 143: torn down, not the cause
        ([_pod("n1", 143), _pod("n2", 2)], None, Cause.INVALID, [], 2),
        ([_pod("n1", 137, "OOMKilled"), _pod("n2", 143)], None, Cause.OUT_OF_MEMORY, [], 137),
        ([_pod("n1", 143), _pod("n3", None, pod_reason="NodeLost")], None, Cause.NODE_LOST, ["n3"], 143),
        ([_pod("n1", 201), _pod("n2", 143)], {"kind": "slow_node", "time": 100.0, "suspects": [{"node": "n1"}]},
         Cause.SLOW_NODE, ["n1"], 201),
        ([_said(_pod("n1", 128, "StartError"), START_NOT_FOUND), _pod("n2", 143)], None, Cause.INVALID, [], 128),
        # a start error that is not the command's (a mount, a device): not known to repeat, so the program's
        ([_said(_pod("n1", 128, "StartError"), START_MOUNT)], None, Cause.APPLICATION_ERROR, [], 128),
    ],
)  # fmt: skip
def test_kubernetes_causes(
    pods: list[dict[str, Any]], record: dict[str, Any] | None, cause: Cause | None, blamed: list[str], code: int | None
) -> None:
    attempt = causes.attempt_of(1, "digits-ab12", pods, record, started_at=50.0)
    assert (attempt.cause, attempt.blamed_nodes, attempt.exit_code) == (cause, blamed, code)
    assert attempt.nodes == ",".join(dict.fromkeys(p["spec"]["nodeName"] for p in pods))


def test_every_node_blamed_so_far_is_avoided() -> None:
    first = causes.attempt_of(1, "a", [_pod("n1", 200), _pod("n2", 143)], HANG)
    second = causes.attempt_of(2, "b", [_pod("n3", None, pod_reason="NodeLost"), _pod("n1", 143)])
    assert causes.avoided([first, second]) == ["n2", "n3"]


def test_the_termination_message_carries_the_trainers_record() -> None:
    """No failure.json handed in (trainctl outside the cluster cannot read the PVC): the record comes from the
    container's termination message (trainer/records.py compact); a message that is not one is skipped, and a
    record older than the attempt is an earlier attempt's."""
    compact = '{"exit_code":200,"kind":"hang","step":30,"suspects":[{"node":"n2","rank":1}],"time":100.0}'
    pods = [_pod("n1", 143), _said(_pod("n2", 200), compact)]
    attempt = causes.attempt_of(1, "digits-ab12", pods, started_at=50.0)
    assert (attempt.cause, attempt.blamed_nodes, attempt.exit_code) == (Cause.HANG, ["n2"], 200)
    assert causes.termination_record([_said(_pod("n1", 1), "Traceback (most recent call last):"), *pods]) == {
        "exit_code": 200, "kind": "hang", "step": 30, "suspects": [{"node": "n2", "rank": 1}], "time": 100.0}  # fmt: skip
    late = causes.attempt_of(2, "digits-ab12-a2", pods, started_at=500.0)
    assert (late.cause, late.blamed_nodes) == (Cause.HANG, [])  # exit 200 still says hang; the old record no node


@pytest.mark.parametrize("api", ["trainjob", "pytorchjob"])
@pytest.mark.parametrize("launch", ["torchrun", "per_node"])
def test_the_next_attempt_is_the_runs_object_kept_off_the_blamed_nodes(api: str, launch: str) -> None:
    """attempts.next_attempt builds attempt N from the run's object as the cluster holds it (the controller has
    no job file): exactly what render gives the object `<run>-a2` with `avoid_nodes` (its folder, its pods'
    addresses), seeded from attempt 1's checkpoints on the PVC, owned by the run's object."""
    job = _job(api).with_overrides(["retries=2"])
    if launch == "per_node":  # a `command:` job's own launcher, once per node (the trainer's is torchrun)
        job = Job.parse({"name": "digits", "command": ["python", "launch.py"], "launch": "per_node", "retries": 2,
                         "resources": {"nodes": 2}, "kubernetes": {"api": api}})  # fmt: skip
    run = build_manifest(job, "digits-ab12") | {}
    run["metadata"] = {**run["metadata"], "uid": "u-1", "resourceVersion": "7",
                       "annotations": {**run["metadata"].get("annotations", {}), ATTEMPTS: "[]"}}  # fmt: skip
    second = next_attempt(run, 2, ["n2", "n1"])
    assert_valid(second)
    meta = second["metadata"]
    assert meta["name"] == "digits-ab12-a2" and meta["labels"][ATTEMPT_OF_LABEL] == "digits-ab12"
    assert RETRIES_LABEL not in meta["labels"] and ATTEMPTS not in meta.get("annotations", {})  # not a run itself
    assert meta["ownerReferences"] == [{"apiVersion": run["apiVersion"], "kind": run["kind"], "name": "digits-ab12",
                                        "uid": "u-1", "controller": False, "blockOwnerDeletion": False}]  # fmt: skip
    first, own = run_paths(run)["checkpoint_dir"], build_manifest(job, "digits-ab12-a2", ["n2", "n1"])
    rendered = seeded(own, first, run_paths(own)["checkpoint_dir"], whole=job.trainer is None)
    assert second["spec"] == rendered["spec"]
    for spec in _pod_specs(second):
        assert spec["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"] == {
            "nodeSelectorTerms": [{"matchExpressions": [NOT_IN]}]}  # fmt: skip
    third = next_attempt(run, 3, ["n2"])  # seeded from attempt 2's folder, not the run's
    assert run_paths(second)["checkpoint_dir"] in str(third["spec"]) and "digits-ab12-a3" in str(third["spec"])
    assert next_attempt(run, 2, ["n1", "n2"]) == second  # pure: the same run and nodes, the same object


@pytest.mark.parametrize(("said", "words"), [
    ('exec: "trainer-launch": executable file not found in $PATH',
     'exec: "trainer-launch": executable file not found in $PATH: the image img:1 does not have the trainer installed; '
     "build it FROM the trainer image (trainer_image/)"),
    ('exec: "/opt/run.sh": stat /opt/run.sh: no such file or directory',
     'exec: "/opt/run.sh": stat /opt/run.sh: no such file or directory: the image img:1 has no /opt/run.sh; install '
     "it there, or name a program the image has"),
    ('exec: "./train.sh": permission denied', 'exec: "./train.sh": permission denied: ./train.sh must be executable in '
     "the image"),
])  # fmt: skip
def test_a_command_the_runtime_could_not_start_is_named_with_its_fix(said: str, words: str) -> None:
    """runc's exec.LookPath errors, inside containerd's StartError message: the record names the program and the
    fix (status shows it as the run's reason); the runtime's whole message is its log tail."""
    pod = _said(_pod("n4", 128, "StartError"), _WRAP.format(said))
    pod["status"]["containerStatuses"][0]["image"] = "img:1"
    record = causes.start_failure([pod])
    assert record is not None and (record["message"], record["node"], record["exit_code"]) == (words, "n4", 128)
    line = failure_line(Failure.model_validate(record))
    assert tail_heading(Failure.model_validate(record)) == "last lines of the runtime"  # no rank ran
    assert line == f"the container could not start on n4 (exit 128): {words}" and record["log_tail"] == [
        _WRAP.format(said)
    ]


def test_a_container_restarted_in_place_that_cannot_start_says_why_it_waits() -> None:
    """A runtime of the user's own with restartPolicy OnFailure: the kubelet restarts the container, which waits in
    CrashLoopBackOff with the start error as its last state; status says so, not `pods running`."""
    pod = _pod("n4")
    cs = pod["status"]["containerStatuses"][0]
    cs["state"] = {"waiting": {"reason": "CrashLoopBackOff"}}
    cs["lastState"] = {"terminated": {"exitCode": 128, "reason": "StartError", "message": START_NOT_FOUND}}
    why = why_not_started({}, [pod], [])
    assert why is not None and why.startswith('the container cannot start on n4 (CrashLoopBackOff): exec: "trainer-la')

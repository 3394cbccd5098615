"""Issue 24 done-when g: a Kubernetes retry after a blamed node lands elsewhere.

The test kubelet knows three nodes (n1..n3, one training pod each: `status.allocatable.pods` 1) and places
pods by the scheduler port (port_scheduler.py). n2 is the bad node: the kubelet gives its pods the trainer
failpoint `allreduce=30*off->hang`, so whichever rank lands there hangs inside its 31st all-reduce. The
other rank's watchdog declares the hang and writes failure.json naming its suspect's node, which the trainer
reads from TRAINCTL_NODE_NAME (the downward API's spec.nodeName, pod.py). trainctl's Kubernetes causes turn
the attempt's pods and that record into an attempt blaming n2; the retry's object (engine.submit with
avoid_nodes) carries `kubernetes.io/hostname NotIn [n2]`, passes strict validation, and its pods land on n1
and n3, resume from the first attempt's newest checkpoint and finish. With n1 and n2 only, the retry's second
pod has no node: it stays Pending with the scheduler's message, and `trainctl status` says so.
Here the test makes each object (engine.create) to check each piece; test_retry_driver.py has trainctl's
own retry driver do it all from `submit`.
"""

from __future__ import annotations

import json
import shutil
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
from k8s_testlib import Operators, assert_valid
from port_scheduler import fake_node
from test_shapes_e2e import check_training, digits, job_for, obj
from trainctl import RunState
from trainctl.runs.causes import Cause, retried
from trainctl.runs.identity import RunIdentity
from trainctl.targets.kubernetes import causes
from trainctl.targets.kubernetes import engine as k8s
from trainctl.targets.kubernetes.kinds import KINDS
from trainctl.targets.kubernetes.render import build_manifest

pytestmark = [pytest.mark.kapi, pytest.mark.slow]
__all__ = ["digits"]  # the fixture, shared with the shapes test
BAD = {"TRAINER_FAILPOINTS": "allreduce=30*off->hang"}
HOSTNAME_NOT_IN = {"key": "kubernetes.io/hostname", "operator": "NotIn"}


def _job(ops: Operators, name: str, api: str = "trainjob") -> Any:
    """No in-place restarts: the operator's own (a JobSet restart, a PyTorchJob's OnFailure) recreate the
    same pods on the same nodes. A TrainJob names runtime r0 with `retries: 1` (trainctl's retry is a new
    object); a PyTorchJob's `retries` is its restart policy, so it gets 0 (restartPolicy Never)."""
    more = {"trainer.hang_timeout": 8, "trainer.timeout_s": 60, "checkpoint.every_steps": 10, "trainer.epochs": 4}
    if api == "trainjob":
        more |= {"kubernetes.runtime": "trainctl-torch-r0", "retries": 1}
    return job_for(name, ops.ns, api, nodes=2, procs=1, **more)


def _pods(ops: Operators, run: Any) -> list[dict[str, Any]]:
    """The run's pods as the API server last held them (a failed JobSet deletes them)."""
    label = KINDS[run.handle.api].pod_label
    found = [rp.extra["api"] for rp in ops.runner.started.values()
             if rp.pod["metadata"]["labels"].get(label) == obj(run)]  # fmt: skip
    assert found, sorted(ops.runner.started)
    return found


def _first_attempt(ops: Operators, digits: Path, name: str, api: str = "trainjob") -> tuple[Any, Any]:
    ops.runner.nodes = [fake_node(n, max_pods=1) for n in ("n1", "n2", "n3")]
    ops.runner.node_env = {"n2": BAD}
    job = _job(ops, name, api).with_identity(RunIdentity.new())  # one run: the retry by hand keeps its uid
    shutil.copytree(digits, ops.claim() / "data" / "digits", dirs_exist_ok=True)
    run = k8s.create(job, kubeconfig=str(ops.cluster.kubeconfig))  # one object: the retry is by hand here
    final, _ = ops.run(run.handle.api, obj(run), timeout=400)
    assert final["status"]["conditions"][-1]["type"] == "Failed", final["status"]
    pods = _pods(ops, run)
    assert sorted(p["spec"]["nodeName"] for p in pods) == ["n1", "n2"]
    failure = ops.claim() / name / f"{obj(run)}-{run.run_uid}" / "output" / "failure.json"
    logs = {rp.name: rp.log_path.read_text()[-3000:] for rp in ops.runner.started.values()}
    assert failure.is_file(), (final["status"], logs)
    record = json.loads(failure.read_text())
    attempt = causes.attempt_of(1, obj(run), pods, record)
    assert attempt.cause is Cause.HANG and attempt.blamed_nodes == ["n2"], (attempt, record)
    if api == "trainjob":  # a PyTorchJob's `retries` is its in-place restarts: 0 here (see _job)
        assert retried(attempt.cause, job.retry_on, attempt.number, job.retries)
    return job, attempt


def _retry(ops: Operators, job: Any, manifest: dict[str, Any], attempt: Any) -> tuple[Any, list[dict[str, Any]]]:
    """The retry's manifest passes the CRD schema and strict Pod validation of its pods (a TrainJob's as the
    Trainer port builds them) and a Strict create on the API server (dry run); then trainctl submits the retry,
    seeded with attempt 1's checkpoints, and its pods land on n1 and n3."""
    assert_valid(manifest)
    kind = k8s.kind_of(manifest)
    manifest["metadata"]["namespace"] = ops.ns
    ops.cluster.custom.create_namespaced_custom_object(
        kind.group, kind.version, ops.ns, kind.plural, manifest, field_validation="Strict", dry_run="All"
    )
    first = f"/mnt/trainctl/{job.name}/{attempt.engine_id}-{job.run_identity.uid}/checkpoints"
    retry = k8s.create(job, kubeconfig=str(ops.cluster.kubeconfig), avoid_nodes=causes.avoided([attempt]), seed=first)
    ops.run(kind.api, obj(retry), timeout=400)
    pods = _pods(ops, retry)
    assert sorted(p["spec"]["nodeName"] for p in pods) == ["n1", "n3"]
    return retry, pods


def test_trainjob_retry_leaves_the_blamed_node_out(operators: Operators, digits: Path) -> None:
    ops = operators
    job, attempt = _first_attempt(ops, digits, "tj-retry")
    avoid = causes.avoided([attempt])
    manifest = build_manifest(job, "tj-retry-a2", avoid)
    pod = manifest["spec"]["runtimePatches"][0]["trainingRuntimeSpec"]["template"]["spec"]["replicatedJobs"][0]
    terms = pod["template"]["spec"]["template"]["spec"]["affinity"]["nodeAffinity"][
        "requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]  # fmt: skip
    assert terms == [{"matchExpressions": [{**HOSTNAME_NOT_IN, "values": ["n2"]}]}]
    retry, pods = _retry(ops, job, manifest, attempt)
    check_training(ops, retry, "tj-retry", world=2, nodes=2)
    logs = "\n".join(k8s.logs(retry))
    assert "resum" in logs.lower(), logs[-3000:]
    second = causes.attempt_of(2, obj(retry), pods)
    assert second.state is RunState.SUCCEEDED and second.cause is None and second.nodes == "n1,n3"


def test_a_retry_with_no_node_left_stays_pending_and_says_why(operators: Operators, digits: Path) -> None:
    """Two nodes for two pods, one blamed: the retry's second pod fits no node. It stays Pending with the
    scheduler's FitError message, and `trainctl status` shows it while the first pod waits at the
    rendezvous for a peer that never comes."""
    ops = operators
    ops.runner.nodes = [fake_node(n, max_pods=1) for n in ("n1", "n2")]
    job = _job(ops, "tj-nofit")
    retry = k8s.create(job, kubeconfig=str(ops.cluster.kubeconfig), avoid_nodes=["n2"])
    with ThreadPoolExecutor(1) as pool:
        running = pool.submit(ops.run, "trainjob", obj(retry), 20)  # it never ends: 20 s is the test's wait
        # no deadline of the test's own: ops.run first waits for the machine's port lock, which another worker's
        # TrainJob can hold for a minute (a 10 s deadline from here once ended before any pod started)
        st = k8s.status(retry)
        while not ("unschedulable" in st.reason and st.state is RunState.RUNNING) and not running.done():
            time.sleep(0.5)
            st = k8s.status(retry)
        pods = _pods(ops, retry)
        with pytest.raises(TimeoutError):  # the placed pod waits for its peer; the JobSet never ends
            running.result()
    message = "0/2 nodes are available: 1 Too many pods, 1 node(s) didn't match Pod's node affinity/selector."
    # created by hand, with no trainctl driver: status says that too, before why the pod waits
    assert st.state is RunState.RUNNING and st.reason.endswith(f"pods running; another waits: unschedulable: {message}")
    assert "no further attempt will start" in st.reason, st
    pending = [p for p in pods if not p["spec"].get("nodeName")]
    assert len(pending) == 1 and sorted(p["spec"].get("nodeName", "") for p in pods) == ["", "n1"], pods
    (cond,) = pending[0]["status"]["conditions"]
    assert (cond["type"], cond["status"], cond["reason"], cond["message"]) == (
        "PodScheduled", "False", "Unschedulable", message)  # fmt: skip


@pytest.mark.long  # the TrainJob case drives the same causes and render
def test_pytorchjob_retry_leaves_the_blamed_node_out(operators: Operators, digits: Path) -> None:
    """The same with a PyTorchJob (Master + Worker): the anti-affinity is in each replica's pod template."""
    ops = operators
    job, attempt = _first_attempt(ops, digits, "pj-retry", "pytorchjob")
    avoid = causes.avoided([attempt])
    manifest = build_manifest(job, "pj-retry-a2", avoid)
    for replica in manifest["spec"]["pytorchReplicaSpecs"].values():
        terms = replica["template"]["spec"]["affinity"]["nodeAffinity"][
            "requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]  # fmt: skip
        assert terms == [{"matchExpressions": [{**HOSTNAME_NOT_IN, "values": ["n2"]}]}]
    retry, _ = _retry(ops, job, manifest, attempt)
    check_training(ops, retry, "pj-retry", world=2, nodes=2)

"""The engine against a real API server (kapi): apply, re-apply, change, status through every condition,
logs (with follow), delete, list, and the API errors as messages."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest
from k8s_testlib import REPO
from port_pytorchjob import Steps as Operator
from trainctl import EngineError, Job, RunState
from trainctl.run import Run
from trainctl.targets.kubernetes import engine
from trainctl.targets.kubernetes.handle import KubernetesHandle
from trainctl.targets.kubernetes.kinds import PYTORCHJOB
from trainctl.targets.kubernetes.render import build_manifest

pytestmark = pytest.mark.kapi


def _job(name: str, **changes: object) -> Job:
    job = Job.from_yaml(REPO / "examples" / "digits.yaml")
    # The engine's PyTorchJob side (the TrainJob side: test_trainjob_kapi.py).
    sets = [f"name={name}", "kubernetes.namespace=e2e", "kubernetes.api=pytorchjob"]
    sets += [f"{k}={v}" for k, v in changes.items()]
    return job.with_overrides(sets)


def test_apply_reapply_change_and_delete(kubeconfig: Path) -> None:
    run = engine.submit(_job("apply-me"), apply=True)
    assert run.id == "kubernetes:e2e/apply-me" and run.handle.apply == "created"
    cluster = engine.connect(None, "e2e")
    first = engine.get_job(cluster, "apply-me", PYTORCHJOB)
    assert first is not None and first["spec"]["nprocPerNode"] == "2"
    # The server defaulted and validated it: it is the CRD's object now.
    assert first["spec"]["runPolicy"]["suspend"] is False

    again = engine.submit(_job("apply-me"), apply=True)
    assert again.handle.apply == "unchanged"
    same = engine.get_job(cluster, "apply-me", PYTORCHJOB)
    assert same is not None and same["metadata"]["resourceVersion"] == first["metadata"]["resourceVersion"]

    changed = engine.submit(_job("apply-me", **{"resources.procs_per_node": 1}), apply=True)
    assert changed.handle.apply == "updated"
    now = engine.get_job(cluster, "apply-me", PYTORCHJOB)
    assert now is not None and now["spec"]["nprocPerNode"] == "1"
    assert now["metadata"]["generation"] == first["metadata"]["generation"] + 1

    dry = engine.submit(_job("apply-me", **{"resources.procs_per_node": 2}), dry_run=True, apply=True)
    assert dry.handle.apply == "updated"
    assert engine.get_job(cluster, "apply-me", PYTORCHJOB)["spec"]["nprocPerNode"] == "1"  # type: ignore[index]

    engine.cancel(run)
    assert engine.get_job(cluster, "apply-me", PYTORCHJOB) is None
    assert engine.status(run).state is RunState.UNKNOWN
    with pytest.raises(EngineError, match=r"404 Not Found: pytorchjobs\.kubeflow\.org/apply-me does not exist"):
        engine.cancel(run)


def test_changed_spec_of_a_started_job_is_a_clear_error(kubeconfig: Path) -> None:
    engine.submit(_job("started"), apply=True)
    Operator(str(kubeconfig), "e2e").add_condition("started", "Created", "PyTorchJobCreated", "created")
    assert engine.submit(_job("started"), apply=True).handle.apply == "unchanged"
    with pytest.raises(EngineError) as info:
        engine.submit(_job("started", **{"trainer.epochs": 9}), apply=True)
    assert "already exists with a different spec" in str(info.value) and "trainctl k8s delete started" in str(
        info.value
    )


def test_immutable_queue_change_is_rejected_by_the_crd_rule(kubeconfig: Path) -> None:
    engine.submit(_job("queued", **{"kubernetes.volcano_queue": "team-a"}), apply=True)
    with pytest.raises(EngineError) as info:
        engine.submit(_job("queued", **{"kubernetes.volcano_queue": "team-b"}), apply=True)
    text = str(info.value)
    assert text.startswith("422 Invalid") and "spec.runPolicy.schedulingPolicy.queue" in text and "immutable" in text


def test_status_through_every_condition(kubeconfig: Path) -> None:
    run = engine.submit(_job("lifecycle", **{"resources.nodes": 2, "kubernetes.use_master": True}), apply=True)
    op = Operator(str(kubeconfig), "e2e")
    st = engine.status(run)
    assert (st.state, st.native_state) == (RunState.QUEUED, "Pending")

    op.add_condition("lifecycle", "Suspended", "JobSuspended", "Kueue: waiting for quota")
    st = engine.status(run)
    assert (st.state, st.native_state) == (RunState.QUEUED, "Suspended") and "waiting for quota" in st.reason

    op.add_condition("lifecycle", "Created", "PyTorchJobCreated", "PyTorchJob lifecycle is created.")
    master = op.create_pod("lifecycle", "Master", 0)
    worker = op.create_pod("lifecycle", "Worker", 0)
    st = engine.status(run)
    assert st.state is RunState.QUEUED and st.native_state == "Created"
    assert st.details["pods"] == {"Master-0": "Pending", "Worker-0": "Pending"}

    op.set_phase(master, "Running")
    op.set_phase(worker, "Running")
    op.add_condition("lifecycle", "Running", "PyTorchJobRunning", "PyTorchJob lifecycle is running.")
    st = engine.status(run)
    assert (st.state, st.native_state) == (RunState.RUNNING, "Running")
    assert st.reason == "PyTorchJobRunning: PyTorchJob lifecycle is running."
    assert st.details["pods"] == {"Master-0": "Running", "Worker-0": "Running"}

    op.add_condition("lifecycle", "Restarting", "PyTorchJobRestarting", "worker 0 exited 143, restarting")
    st = engine.status(run)
    assert (st.state, st.native_state) == (RunState.RUNNING, "Restarting") and "143" in st.reason

    op.add_condition("lifecycle", "Running", "PyTorchJobRunning", "running again")
    assert engine.status(run).native_state == "Running"

    op.set_phase(worker, "Failed")
    op.add_condition("lifecycle", "Failed", "PyTorchJobFailed", "Worker-0 exited with code 2")
    st = engine.status(run)
    assert (st.state, st.native_state) == (RunState.FAILED, "Failed") and "code 2" in st.reason
    assert [c["type"] for c in st.details["conditions"]][-1] == "Failed"

    run2 = engine.submit(_job("lifecycle-ok"), apply=True)
    op.add_condition("lifecycle-ok", "Created", "PyTorchJobCreated", "created")
    op.add_condition("lifecycle-ok", "Running", "PyTorchJobRunning", "running")
    op.add_condition(
        "lifecycle-ok", "Succeeded", "PyTorchJobSucceeded", "PyTorchJob lifecycle-ok is successfully completed."
    )
    st = engine.status(run2)
    assert (st.state, st.native_state) == (RunState.SUCCEEDED, "Succeeded") and st.state.finished


def test_logs_all_ranks_one_rank_and_follow(kubeconfig: Path) -> None:
    run = engine.submit(_job("chatty", **{"resources.nodes": 3}), apply=True)
    op = Operator(str(kubeconfig), "e2e")
    pods = [op.create_pod("chatty", "Worker", i, log=f"w{i} line1\nw{i} line2\n", phase="Running") for i in (2, 0, 1)]
    assert list(engine.logs(run)) == [
        "[rank 0] w0 line1", "[rank 0] w0 line2", "[rank 1] w1 line1", "[rank 1] w1 line2",
        "[rank 2] w2 line1", "[rank 2] w2 line2",
    ]  # fmt: skip
    assert list(engine.logs(run, rank=1)) == ["[rank 1] w1 line1", "[rank 1] w1 line2"]
    with pytest.raises(EngineError, match="no pods for rank 7"):
        list(engine.logs(run, rank=7))

    lines: list[str] = []
    follower = threading.Thread(target=lambda: lines.extend(engine.logs(run, follow=True, rank=0)), daemon=True)
    follower.start()
    time.sleep(1.0)
    worker0 = pods[1]
    op.set_log(worker0, "w0 line1\nw0 line2\nw0 step 10 loss 0.5\n")
    time.sleep(1.0)
    assert follower.is_alive(), "follow must keep streaming while the pod runs"
    op.set_phase(worker0, "Succeeded")
    follower.join(timeout=20)
    assert not follower.is_alive(), "follow must end when the pod ends"
    assert lines == ["[rank 0] w0 line1", "[rank 0] w0 line2", "[rank 0] w0 step 10 loss 0.5"]


def test_follow_waits_for_pods_to_appear(kubeconfig: Path) -> None:
    run = engine.submit(_job("late"), apply=True)
    op = Operator(str(kubeconfig), "e2e")
    lines: list[str] = []
    follower = threading.Thread(target=lambda: lines.extend(engine.logs(run, follow=True, poll=0.2)), daemon=True)
    follower.start()
    time.sleep(0.8)
    pod = op.create_pod("late", "Worker", 0, log="hello\n", phase="Running")
    time.sleep(0.8)
    op.set_phase(pod, "Succeeded")
    follower.join(timeout=20)
    assert lines == ["[rank 0] hello"]


def test_list(kubeconfig: Path) -> None:
    engine.submit(_job("listed-a"), apply=True)
    engine.submit(_job("listed-b"), apply=True)
    rows = engine.list_jobs(engine.connect(None, "e2e"))
    names = {r["name"]: r for r in rows}
    assert {"listed-a", "listed-b"} <= set(names)
    assert names["listed-a"]["state"] == "queued" and names["listed-a"]["managed_by_trainctl"] is True


def test_422_lists_rejected_fields_from_the_real_server(kubeconfig: Path) -> None:
    manifest = build_manifest(_job("invalid"))
    # Well-typed (server-side apply builds its typed patch) but breaking the CRD's quantity pattern twice.
    manifest["spec"]["runPolicy"]["schedulingPolicy"] = {"minResources": {"cpu": "lots", "memory": "1 TB"}}
    with pytest.raises(EngineError) as info:
        engine.apply_manifest(engine.connect(None, "e2e"), manifest)
    text = str(info.value)
    assert text.startswith("422 Invalid: the API server rejected pytorchjobs.kubeflow.org/invalid; rejected fields:")
    assert '\n  - spec.runPolicy.schedulingPolicy.minResources.cpu: Invalid value: "lots"' in text
    assert '\n  - spec.runPolicy.schedulingPolicy.minResources.memory: Invalid value: "1 TB"' in text


def test_type_errors_from_server_side_apply_list_the_fields(kubeconfig: Path) -> None:
    manifest = build_manifest(_job("typo"))
    manifest["spec"]["pytorchReplicaSpecs"]["Worker"]["replicas"] = "two"
    with pytest.raises(EngineError) as info:
        engine.apply_manifest(engine.connect(None, "e2e"), manifest)
    assert "rejected fields:\n  - spec.pytorchReplicaSpecs.Worker.replicas: expected numeric" in str(info.value)


def test_unreachable_server_and_bad_context(kubeconfig: Path, tmp_path: Path) -> None:
    with pytest.raises(EngineError, match="cannot load the kubeconfig context 'nope'"):
        engine.connect("nope", "e2e")
    dead = tmp_path / "dead"
    text = kubeconfig.read_text()
    import re

    dead.write_text(re.sub(r"https://127\.0\.0\.1:\d+", "https://127.0.0.1:9", text))
    run = Run(target="kubernetes", native_id="e2e/x", handle=KubernetesHandle(kubeconfig=str(dead)))
    start = time.monotonic()
    with pytest.raises(EngineError, match=r"cannot reach the Kubernetes API server at https://127\.0\.0\.1:9"):
        engine.status(run)
    assert time.monotonic() - start < 20

"""Issue 38: trainctl's controller retries Kubernetes runs from inside the cluster, for `k8s apply` and `submit`
alike, and nothing runs on the submitting machine.

The controller runs as pods of k8s/controller.yaml's Deployment under the test kubelet (pod_runner.py, one
process per pod). The test plays the Deployment's ReplicaSet: each replica is a Pod made from the
template (kubernetes pkg/controller/controller_utils.go GetPodFromTemplate: the template's labels and
spec, the name `<replicaset>-<5 random>`), with the kustomize-style args a test cluster needs (its own
namespace, a 4 s lease). The cluster has three nodes; n2's pods get the trainer failpoint
`allreduce=30*off->hang`, so attempt 1 (on n1 and n2) ends in a hang blaming n2, and attempt 2 must land on
n1 and n3. The test runs each object with the operator port, as the cluster's operator would.
"""

from __future__ import annotations

import json
import os
import re
import secrets
import shutil
import signal
import threading
import time
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from k8s_testlib import REPO, Operators
from port_scheduler import fake_node
from run_cli import cli  # tests/support
from tcp_proxy import TcpProxy
from test_shapes_e2e import digits, job_for, obj
from trainctl.targets.kubernetes.attempts import ATTEMPT_OF_LABEL, ATTEMPTS
from trainctl.targets.kubernetes.cluster import connect
from trainctl.targets.kubernetes.kinds import KINDS
from trainctl.targets.kubernetes.objects import get_job
from trainctl.targets.kubernetes.presence import controller_for

pytestmark = [pytest.mark.kapi, pytest.mark.slow]
__all__ = ["digits"]  # the fixture, shared with the shapes test
BAD = {"TRAINER_FAILPOINTS": "allreduce=30*off->hang"}
FAST_LEASE = ["--lease-seconds", "4", "--renew-seconds", "3", "--retry-seconds", "1"]


def deployment() -> dict[str, Any]:
    docs = [d for d in yaml.safe_load_all((REPO / "k8s" / "controller.yaml").read_text()) if d]
    (found,) = [d for d in docs if d["kind"] == "Deployment"]
    return found


class Replicas:
    """The controller Deployment's pods in the test's namespace, run by the test kubelet."""

    def __init__(self, ops: Operators, kubeconfig: Path) -> None:
        self.ops, self.pods = ops, []  # type: ignore[var-annotated]
        ops.runner.credentials["trainctl-controller"] = {"KUBECONFIG": str(kubeconfig)}

    def add(self) -> Any:
        template = deployment()["spec"]["template"]
        name = f"trainctl-controller-{secrets.token_hex(3)[:5]}"
        spec = json.loads(json.dumps(template["spec"]))
        spec["containers"][0]["args"] = ["--namespace", self.ops.ns, *FAST_LEASE]
        pod = {"apiVersion": "v1", "kind": "Pod", "spec": spec,
               "metadata": {"name": name, "namespace": self.ops.ns, "labels": template["metadata"]["labels"]}}  # fmt: skip
        created = self.ops.cluster.core.create_namespaced_pod(self.ops.ns, pod)
        # on a node of its own, not one of the training nodes (the test kubelet places pods only among `nodes`)
        nodes, self.ops.runner.nodes = self.ops.runner.nodes, None
        try:
            rp = self.ops.runner.start(self.ops.cluster.api.sanitize_for_serialization(created))
        finally:
            self.ops.runner.nodes = nodes
        self.pods.append(rp)
        return rp

    def kill(self, rp: Any) -> None:
        """The pod's processes killed outright (a node gone, an OOM kill): no chance to hand its lock over."""
        os.killpg(rp.proc.pid, signal.SIGKILL)
        rp.proc.wait()
        self.ops.cluster.core.delete_namespaced_pod(rp.name, self.ops.ns, _preload_content=False)

    def logs(self) -> str:
        return "\n".join(rp.log_path.read_text(errors="replace") for rp in self.pods)

    def stop(self) -> None:
        for rp in self.pods:
            if rp.proc is not None and rp.proc.poll() is None:
                os.killpg(rp.proc.pid, signal.SIGKILL)
                rp.proc.wait()


@pytest.fixture
def replicas(operators: Operators, kapi: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Replicas]:
    monkeypatch.setenv("TRAINCTL_CONTROLLER_NAMESPACE", operators.ns)  # where `submit` and `status` look
    reps = Replicas(operators, kapi)
    yield reps
    reps.stop()


def _leader(ops: Operators, timeout: float = 30) -> str:
    """The pod that holds the lock, once one answers for the test's namespace."""
    cluster = connect(None, ops.ns, str(ops.cluster.kubeconfig))
    deadline = time.monotonic() + timeout
    while not (found := controller_for(cluster, ops.ns)).answers:
        assert time.monotonic() < deadline, found.words
        time.sleep(0.5)
    return re.search(r"controller \((\S+) in", found.words).group(1)  # type: ignore[union-attr]


def _nodes(ops: Operators, digits: Path) -> None:
    ops.runner.nodes = [fake_node(n, max_pods=1) for n in ("n1", "n2", "n3")]
    ops.runner.node_env = {"n2": BAD}
    shutil.copytree(digits, ops.claim() / "data" / "digits", dirs_exist_ok=True)


def _job(ops: Operators, name: str) -> Any:
    more = {"trainer.hang_timeout": 8, "trainer.timeout_s": 60, "checkpoint.every_steps": 10, "trainer.epochs": 4,
            "retries": 2}  # fmt: skip
    return job_for(name, ops.ns, "trainjob", nodes=2, procs=1, **more)


def _wait_for(ops: Operators, name: str, timeout: float) -> None:
    cluster = connect(None, ops.ns, str(ops.cluster.kubeconfig))
    deadline = time.monotonic() + timeout
    while get_job(cluster, name, KINDS["trainjob"]) is None:
        assert time.monotonic() < deadline, f"the controller created no {name} in {timeout}s"
        time.sleep(0.5)


def _run_attempts(ops: Operators, first: str, during: Any = None) -> None:
    """Attempt 1 fails (the hang on n2), the controller makes attempt 2, which succeeds. `during`: what the test
    does to the cluster while attempt 1 runs (once its pods run)."""
    result: dict[str, Any] = {}
    worker = threading.Thread(target=lambda: result.update(final=ops.run("trainjob", first, timeout=400)[0]))
    worker.start()
    if during is not None:
        deadline = time.monotonic() + 60
        while not any(rp.proc is not None and rp.pod["metadata"]["labels"].get(KINDS["trainjob"].pod_label) == first
                      for rp in ops.runner.started.values()):  # fmt: skip
            assert time.monotonic() < deadline, "attempt 1's pods never started"
            time.sleep(0.2)
        during()
    worker.join()
    assert result["final"]["status"]["conditions"][-1]["type"] == "Failed", result["final"]["status"]
    _wait_for(ops, f"{first}-a2", timeout=60)
    final, _ = ops.run("trainjob", f"{first}-a2", timeout=400)
    assert final["status"]["conditions"][-1]["type"] == "Complete", final["status"]


def _status(run_id: str, home: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    """`trainctl status` on another machine: a TRAINCTL_HOME that never saw the run, the cluster's kubeconfig."""
    monkeypatch.setenv("TRAINCTL_HOME", str(home))
    result = cli("status", run_id, "--output", "json")
    assert result.exit_code == 0, result.stdout + result.stderr
    found: dict[str, Any] = json.loads(result.stdout)
    return found


def _settled(ops: Operators, run_id: str, home: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    monkeypatch.setenv("KUBECONFIG", str(ops.cluster.kubeconfig))
    deadline = time.monotonic() + 60
    while (st := _status(run_id, home, monkeypatch))["state"] != "succeeded":
        assert time.monotonic() < deadline and st["state"] == "running", st
        time.sleep(0.5)
    return st


def _check_attempts(ops: Operators, st: dict[str, Any], first: str) -> None:
    one, two = st["attempts"]
    assert (one["number"], one["cause"], one["blamed_nodes"], one["exit_code"]) == (1, "hang", ["n2"], 200), one
    assert (two["number"], two["state"], two["engine_id"]) == (2, "succeeded", f"{ops.ns}/{first}-a2"), two
    assert sorted(two["nodes"].split(",")) == ["n1", "n3"] and two["resumed_from_step"] >= 10, two
    cluster = connect(None, ops.ns, str(ops.cluster.kubeconfig))
    found = cluster.custom().list_namespaced_custom_object(
        "trainer.kubeflow.org", "v1alpha1", ops.ns, "trainjobs", label_selector=f"{ATTEMPT_OF_LABEL}={first}"
    )
    assert [o["metadata"]["name"] for o in found["items"]] == [f"{first}-a2"]  # attempt 2, once; no attempt 3


def _no_local_driver(home: Path) -> None:
    assert not (home / "kubernetes-runs").exists() or not any((home / "kubernetes-runs").iterdir())


def test_apply_is_retried_by_the_controller_through_an_api_server_outage(
    operators: Operators, digits: Path, replicas: Replicas, kapi: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`trainctl k8s apply` of a job with retries; the controller reaches the API server through a proxy that
    goes away for 10 s while attempt 1 runs. It keeps its lock or takes it again, records attempt 1 and makes
    attempt 2; another machine's `trainctl status` lists both."""
    ops = operators
    server = yaml.safe_load(kapi.read_text())["clusters"][0]["cluster"]["server"]
    proxy = TcpProxy(int(server.rsplit(":", 1)[1]))
    through = tmp_path / "kubeconfig-through-proxy"
    through.write_text(kapi.read_text().replace(server, f"https://127.0.0.1:{proxy.port}"))
    ops.runner.credentials["trainctl-controller"] = {"KUBECONFIG": str(through)}
    replicas.add()
    _leader(ops)
    _nodes(ops, digits)
    job_file = tmp_path / "tj-apply.yaml"
    job_file.write_text(_job(ops, "tj-apply").to_yaml())
    monkeypatch.setenv("KUBECONFIG", str(kapi))
    with warnings.catch_warnings(record=True) as said:
        warnings.simplefilter("always")
        result = cli("k8s", "apply", str(job_file))
    assert result.exit_code == 0, result.stdout + result.stderr
    assert not [w for w in said if "controller" in str(w.message)], [str(w.message) for w in said]

    def outage() -> None:
        time.sleep(2)
        proxy.cut()
        time.sleep(10)
        proxy.restore()

    _run_attempts(ops, "tj-apply", outage)
    st = _settled(ops, f"kubernetes:{ops.ns}/tj-apply", tmp_path / "another-machine", monkeypatch)
    _check_attempts(ops, st, "tj-apply")
    logs = replicas.logs()
    assert "no longer leads" in logs and logs.count(" leads; ") >= 2, logs[-3000:]  # it lost the lock, took it again
    assert logs.count("started attempt 2") == 1, logs[-3000:]
    root = get_job(connect(None, ops.ns, str(kapi)), "tj-apply", KINDS["trainjob"])
    assert root is not None and [a["number"] for a in json.loads(root["metadata"]["annotations"][ATTEMPTS])] == [1, 2]


def test_submit_is_retried_by_the_controller_once_across_a_killed_leader(
    operators: Operators, digits: Path, replicas: Replicas, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`trainctl submit` finds the controller and starts no driver here. Two replicas run; the leader is killed
    while attempt 1 runs, the other takes the lock, a replacement pod joins, and attempt 2 is made exactly once."""
    ops = operators
    first_pod, second_pod = replicas.add(), replicas.add()
    leader = _leader(ops)
    _nodes(ops, digits)
    home = Path(os.environ["TRAINCTL_HOME"])
    run = _job(ops, "tj-ha").submit("kubernetes", kubeconfig=str(ops.cluster.kubeconfig))
    assert run.handle.driver_dir is None
    _no_local_driver(home)
    killed = first_pod if first_pod.name == leader else second_pod

    def kill_the_leader() -> None:
        time.sleep(1)
        replicas.kill(killed)
        replicas.add()  # the ReplicaSet's replacement

    _run_attempts(ops, obj(run), kill_the_leader)
    assert _leader(ops) != killed.name
    st = _settled(ops, run.id, tmp_path / "another-machine", monkeypatch)
    _check_attempts(ops, st, obj(run))
    assert replicas.logs().count("started attempt 2") == 1, replicas.logs()[-3000:]


def test_a_deleted_runs_attempts_go_and_an_absent_controller_is_said(
    operators: Operators, replicas: Replicas, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`kubectl delete` of a run's object: the controller deletes its attempts (as the garbage collector would,
    by their owner reference; the test API server has none). With every replica gone, `status` says that no
    controller answers, once the lock's lease has run out."""
    from trainctl.targets.kubernetes.attempts import next_attempt
    from trainctl.targets.kubernetes.render import build_manifest

    ops = operators
    only = replicas.add()
    _leader(ops)
    custom = ops.cluster.custom
    job = _job(ops, "tj-gone")
    root = build_manifest(job, "tj-gone")
    created = custom.create_namespaced_custom_object("trainer.kubeflow.org", "v1alpha1", ops.ns, "trainjobs", root)
    orphan = next_attempt(created, 2, ["n2"])  # an attempt whose run's object is then deleted
    custom.create_namespaced_custom_object("trainer.kubeflow.org", "v1alpha1", ops.ns, "trainjobs", orphan)
    monkeypatch.setenv("KUBECONFIG", str(ops.cluster.kubeconfig))
    st = _status(f"kubernetes:{ops.ns}/tj-gone", Path(os.environ["TRAINCTL_HOME"]), monkeypatch)
    assert "no trainctl controller" not in st["reason"] and "no controller answers" not in st["reason"], st
    custom.delete_namespaced_custom_object("trainer.kubeflow.org", "v1alpha1", ops.ns, "trainjobs", "tj-gone")
    cluster = connect(None, ops.ns, str(ops.cluster.kubeconfig))
    deadline = time.monotonic() + 20
    while get_job(cluster, "tj-gone-a2", KINDS["trainjob"]) is not None:
        assert time.monotonic() < deadline, "the controller left the deleted run's attempt"
        time.sleep(0.5)
    custom.create_namespaced_custom_object("trainer.kubeflow.org", "v1alpha1", ops.ns, "trainjobs", root)
    replicas.kill(only)
    deadline = time.monotonic() + 30
    while "no controller answers" not in (st := _status(f"kubernetes:{ops.ns}/tj-gone", Path(os.environ["TRAINCTL_HOME"]),
                                                         monkeypatch))["reason"]:  # fmt: skip
        assert time.monotonic() < deadline, st
        time.sleep(1)
    assert "no further attempt will start until one runs" in st["reason"], st

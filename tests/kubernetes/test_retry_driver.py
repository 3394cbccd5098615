"""Issue 24 done-when g, end to end: `submit` with `retries` on Kubernetes, and trainctl's own retry driver
(not the test) leaves the blamed node out.

The test kubelet knows three nodes (n1..n3, one training pod each) and places pods by the scheduler port;
n2's pods get the trainer failpoint `allreduce=30*off->hang`. The test plays only the cluster: it runs each
object the driver creates with the operator port. Attempt 1 (`<run>`, runtime trainctl-torch-r0: no in-place
restart) lands on n1 and n2; the live rank declares the hang naming n2 and writes the compact record to its
termination message, which the test kubelet copies into the pod's status as kubelet does. The driver reads
that from the API server, classifies the attempt (hang, blamed n2), and creates attempt 2 (`<run>-a2`) with
`kubernetes.io/hostname NotIn [n2]`, seeded from attempt 1's checkpoints; its pods land on n1 and n3, resume
and finish. `trainctl status --output json` shows both attempts.
"""

from __future__ import annotations

import json
import shutil
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from k8s_testlib import Operators
from port_scheduler import fake_node
from run_cli import cli  # tests/support
from test_shapes_e2e import digits, job_for, obj
from trainctl.targets.kubernetes.driven import stop_driver
from trainctl.targets.kubernetes.kinds import KINDS
from trainctl.targets.kubernetes.objects import get_job

pytestmark = [pytest.mark.kapi, pytest.mark.slow]
__all__ = ["digits"]  # the fixture, shared with the shapes test
BAD = {"TRAINER_FAILPOINTS": "allreduce=30*off->hang"}


def _status(run_id: str) -> dict[str, Any]:
    result = cli("status", run_id, "--output", "json")
    assert result.exit_code == 0, result.stdout + result.stderr
    found: dict[str, Any] = json.loads(result.stdout)
    return found


def _wait_for_object(ops: Operators, api: str, name: str, timeout: float) -> None:
    """The driver's next object, as the operator would see it appear."""
    deadline = time.monotonic() + timeout
    while get_job(ops_cluster(ops), name, KINDS[api]) is None:
        assert time.monotonic() < deadline, f"the driver created no {name} in {timeout}s"
        time.sleep(0.5)


def ops_cluster(ops: Operators) -> Any:
    from trainctl.targets.kubernetes.cluster import connect

    return connect(None, ops.ns, str(ops.cluster.kubeconfig))


@pytest.fixture
def runs() -> Iterator[list[Any]]:
    """The driven runs a test submits: their drivers never outlive it (a failed test cancels them)."""
    started: list[Any] = []
    yield started
    for run in started:
        stop_driver(run)


def _driven_run(ops: Operators, digits: Path, name: str, api: str, runs: list[Any]) -> tuple[Any, str]:
    ops.runner.nodes = [fake_node(n, max_pods=1) for n in ("n1", "n2", "n3")]
    ops.runner.node_env = {"n2": BAD}
    more = {"trainer.hang_timeout": 8, "trainer.timeout_s": 60, "checkpoint.every_steps": 10, "trainer.epochs": 4,
            "retries": 2}  # fmt: skip
    job = job_for(name, ops.ns, api, nodes=2, procs=1, **more)
    shutil.copytree(digits, ops.claim() / "data" / "digits", dirs_exist_ok=True)
    with pytest.warns(UserWarning, match=r"no trainctl controller runs .*this machine drives its retries"):
        run = job.submit("kubernetes", kubeconfig=str(ops.cluster.kubeconfig))
    runs.append(run)
    first = obj(run)
    final, _ = ops.run(api, first, timeout=400)
    assert final["status"]["conditions"][-1]["type"] == "Failed", final["status"]
    _wait_for_object(ops, api, f"{first}-a2", timeout=60)
    final, _ = ops.run(api, f"{first}-a2", timeout=400)
    assert final["status"]["conditions"][-1]["type"] in ("Complete", "Succeeded"), final["status"]
    deadline = time.monotonic() + 60
    while (st := _status(run.id))["state"] != "succeeded":
        assert time.monotonic() < deadline and st["state"] == "running", st
        time.sleep(0.5)
    return run, first


def _check(ops: Operators, run: Any, first: str, name: str, api: str) -> None:
    st = _status(run.id)
    one, two = st["attempts"]
    assert (one["number"], one["cause"], one["blamed_nodes"], one["exit_code"]) == (1, "hang", ["n2"], 200), one
    assert one["engine_id"] == f"{ops.ns}/{first}" and sorted(one["nodes"].split(",")) == ["n1", "n2"], one
    assert (two["number"], two["state"], two.get("cause")) == (2, "succeeded", None), two
    assert two["engine_id"] == f"{ops.ns}/{first}-a2" and two["nodes"] in ("n1,n3", "n3,n1"), two
    assert two["resumed_from_step"] is not None and two["resumed_from_step"] >= 10, two
    assert one["started_at"] < one["ended_at"] <= two["started_at"] < two["ended_at"], st
    # the driver's attempt 2: the anti-affinity on its pods, and the operators' restarts off on both
    pods = [rp.pod for rp in ops.runner.started.values() if rp.pod["metadata"]["labels"].get(KINDS[api].pod_label)
            == f"{first}-a2"]  # fmt: skip
    assert len(pods) == 2
    for pod in pods:
        terms = pod["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
        assert terms["nodeSelectorTerms"] == [
            {"matchExpressions": [{"key": "kubernetes.io/hostname", "operator": "NotIn", "values": ["n2"]}]}
        ]
    summary = json.loads((ops.claim() / name / f"{first}-a2-{run.run_uid}" / "output" / "summary.json").read_text())
    assert summary["world_size"] == 2 and summary["val_accuracy"] > 0.9, summary
    text = cli("status", run.id).stdout
    assert "attempt 1" in text and "hang" in text and "n2" in text and "attempt 2" in text, text


def test_submit_retries_a_hang_away_from_the_blamed_node(operators: Operators, digits: Path, runs: list[Any]) -> None:
    run, first = _driven_run(operators, digits, "tj-driven", "trainjob", runs)
    trainjob = get_job(ops_cluster(operators), first, KINDS["trainjob"])
    assert trainjob is not None and trainjob["spec"]["runtimeRef"]["name"] == "trainctl-torch-r0"
    _check(operators, run, first, "tj-driven", "trainjob")


@pytest.mark.long  # the same driver over a PyTorchJob (Master + Worker, restartPolicy Never)
def test_submit_retries_a_pytorchjob_hang_away_from_the_blamed_node(
    operators: Operators, digits: Path, runs: list[Any]
) -> None:
    run, first = _driven_run(operators, digits, "pj-driven", "pytorchjob", runs)
    pj = get_job(ops_cluster(operators), first, KINDS["pytorchjob"])
    assert pj is not None
    for replica in pj["spec"]["pytorchReplicaSpecs"].values():
        assert replica["restartPolicy"] == "Never", replica
    _check(operators, run, first, "pj-driven", "pytorchjob")


def test_cancel_stops_the_driver_and_deletes_the_attempt(operators: Operators, runs: list[Any]) -> None:
    """`trainctl cancel` of a driven run: the driver starts nothing more, the current object is deleted, and
    the run ends `cancelled` with its one attempt recorded so."""
    ops = operators
    job = job_for("tj-cancel", ops.ns, "trainjob", nodes=1, procs=1, retries=1)
    run = job.submit("kubernetes", kubeconfig=str(ops.cluster.kubeconfig))
    runs.append(run)
    deadline = time.monotonic() + 30
    while not (Path(run.handle.driver_dir) / "state.json").exists():  # the driver watches attempt 1
        assert time.monotonic() < deadline, "the driver did not start"
        time.sleep(0.2)
    result = cli("cancel", run.id)
    assert result.exit_code == 0, result.stdout + result.stderr
    while (st := _status(run.id))["state"] != "cancelled":
        assert time.monotonic() < deadline, st
        time.sleep(0.3)
    assert get_job(ops_cluster(ops), obj(run), KINDS["trainjob"]) is None
    (only,) = st["attempts"]
    assert (only["number"], only["state"], only["engine_id"]) == (1, "cancelled", f"{ops.ns}/{obj(run)}"), only
    assert get_job(ops_cluster(ops), f"{obj(run)}-a2", KINDS["trainjob"]) is None

"""Every job shape, under the ported operators, for real: trainctl renders and applies the job to the test
API server; the Trainer v2.3.0 / Training Operator v1.9 port creates the pods there as the real operator
would (names, env, init containers, ports); the test kubelet runs each pod's container (the launcher,
torchrun, gloo) on this machine. The pods must agree on one rendezvous, take node ranks 0..N-1 once
each, and train digits to accuracy > 0.9 with the expected world size; `trainctl` reads status and logs.
"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path
from typing import Any

import pytest
from digits import example_digits  # tests/support
from k8s_testlib import REPO, Operators
from port_pss import violations
from trainctl import Job, RunState
from trainctl.targets.kubernetes import engine
from trainctl.targets.kubernetes import engine as k8s
from trainctl.targets.lookup import get_target

pytestmark = [pytest.mark.kapi, pytest.mark.slow]


@pytest.fixture(scope="module")
def digits() -> Path:
    return example_digits()


def job_for(name: str, ns: str, api: str, nodes: int, procs: int, **more: Any) -> Job:
    job = Job.from_yaml(REPO / "examples" / "digits.yaml")
    sets = [
        f"name={name}", f"kubernetes.namespace={ns}", f"kubernetes.api={api}", f"resources.nodes={nodes}",
        f"resources.procs_per_node={procs}", "env.LOGLEVEL=INFO",
        *(f"{k}={v}" for k, v in more.items()),
    ]  # fmt: skip
    return job.with_overrides(sets)


def submit_and_run(ops: Operators, job: Job, digits: Path) -> tuple[Any, Any, Any]:
    shutil.copytree(digits, ops.claim() / "data" / "digits", dirs_exist_ok=True)
    run = k8s.submit(job, kubeconfig=str(ops.cluster.kubeconfig))
    api = run.handle.api
    final, ctl = ops.run(api, obj(run), timeout=400)
    return run, final, ctl


def obj(run: Any) -> str:
    """The run's object: `trainctl submit` names it <job name>-<4 hex>."""
    return str(run.native_id.partition("/")[2])


def check_training(ops: Operators, run: Any, name: str, world: int, nodes: int) -> None:
    st = k8s.status(run)
    assert st.state is RunState.SUCCEEDED, (st, list(k8s.logs(run))[-40:])
    folder = f"{obj(run)}-{run.run_uid}"  # the object and the run's uid
    assert obj(run).startswith(f"{name}-") and run.paths.output_dir == f"/mnt/trainctl/{name}/{folder}/output"
    summary = json.loads((ops.claim() / name / folder / "output" / "summary.json").read_text())
    assert summary["world_size"] == world and summary["val_accuracy"] > 0.9, summary
    # progress without the TrainJobStatus gate (and always for a PyTorchJob): the rank-0 pod's last progress line
    found = get_target("kubernetes").status(run).progress
    assert found is not None and found.step == found.total_steps == summary["steps"], found
    lines = list(k8s.logs(run))
    ranks: dict[str, list[int]] = {}
    for line in lines:
        m = re.match(r"\[rank (\d+)\] .*group_rank=(\d+)", line)
        if m:
            ranks.setdefault(m.group(1), []).append(int(m.group(2)))
    # one rendezvous: every pod's torchrun agent got its own node rank, 0..N-1 once each
    assert sorted(r for rs in ranks.values() for r in rs) == list(range(nodes)), ranks
    assert len(ranks) == nodes


def test_trainjob_two_nodes(operators: Operators, digits: Path) -> None:
    job = job_for("tj-two", operators.ns, "trainjob", nodes=2, procs=1)
    run, _, _ = submit_and_run(operators, job, digits)
    pods = operators.cluster.core.list_namespaced_pod(operators.ns).items
    env = {e.name: e.value for e in pods[0].spec.containers[0].env}
    name = obj(run)
    assert env["PET_MASTER_ADDR"] == f"{name}-node-0-0.{name}" and env["PET_MASTER_PORT"] == "29500"
    assert sorted(p.spec.hostname for p in pods) == [f"{name}-node-0-0", f"{name}-node-0-1"]
    for pod in pods:
        assert violations(operators.cluster.api.sanitize_for_serialization(pod.spec)) == []
    check_training(operators, run, "tj-two", world=2, nodes=2)


def test_trainjob_three_nodes_two_processes(operators: Operators, digits: Path) -> None:
    job = job_for("tj-three", operators.ns, "trainjob", nodes=3, procs=2)
    run, _, _ = submit_and_run(operators, job, digits)
    check_training(operators, run, "tj-three", world=6, nodes=3)


def test_pytorchjob_master_and_worker(operators: Operators, digits: Path) -> None:
    job = job_for("pj-master", operators.ns, "pytorchjob", nodes=2, procs=1)
    manifest = engine.build_manifest(job)
    assert list(manifest["spec"]["pytorchReplicaSpecs"]) == ["Master", "Worker"]  # the default now
    run, final, _ = submit_and_run(operators, job, digits)
    assert final["status"]["conditions"][-1]["type"] == "Succeeded"
    check_training(operators, run, "pj-master", world=2, nodes=2)


def test_pytorchjob_elastic_one_to_three(operators: Operators, digits: Path) -> None:
    job = job_for("pj-elastic", operators.ns, "pytorchjob", nodes=3, procs=1,
                  **{"resources.elastic.min_nodes": 1, "resources.elastic.max_nodes": 3})  # fmt: skip
    manifest = engine.build_manifest(job)
    assert list(manifest["spec"]["pytorchReplicaSpecs"]) == ["Worker"]
    run, _, _ = submit_and_run(operators, job, digits)
    pods = operators.cluster.core.list_namespaced_pod(operators.ns).items
    env = {e.name: e.value for e in pods[0].spec.containers[0].env}
    assert env["PET_RDZV_ENDPOINT"] == f"{obj(run)}-worker-0:23456" and env["PET_NNODES"] == "1:3"
    check_training(operators, run, "pj-elastic", world=3, nodes=3)

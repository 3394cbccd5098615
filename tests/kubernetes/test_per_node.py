"""`launch: per_node` on Kubernetes, for real (issue 29): trainctl submits a TrainJob and a PyTorchJob whose
command is the user's own `torchrun --nnodes 2 --nproc-per-node 2 train.py` (shipped with `code:`); the ported
operators create 2 pods, the test kubelet runs them, and each pod's launcher starts that torchrun once with
its node's rank, the master pod's name and the pods' names. The 4 workers train together (world 4), rank 0
writes its checkpoint and result into the run's folders on the PVC.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from k8s_testlib import REPO, Operators
from trainctl import Job, RunState
from trainctl.targets.kubernetes import engine as k8s

pytestmark = [pytest.mark.kapi, pytest.mark.slow]
COMMAND = ["torchrun", "--nnodes", "2", "--nproc-per-node", "2", "train.py"]


@pytest.mark.parametrize("api", ["trainjob", "pytorchjob"])
def test_the_users_torchrun_runs_once_per_pod(operators: Operators, api: str) -> None:
    name = f"own-{api}"
    job = Job.parse({
        "name": name, "command": COMMAND, "launch": "per_node", "code": str(REPO / "tests" / "programs" / "per_node"),
        "resources": {"nodes": 2, "procs_per_node": 2},
        "kubernetes": {"namespace": operators.ns, "api": api, "pvc": "trainctl-checkpoints"},
    })  # fmt: skip
    run = k8s.submit(job, kubeconfig=str(operators.cluster.kubeconfig))
    obj = run.native_id.partition("/")[2]
    operators.run(run.handle.api, obj, timeout=400)
    st = k8s.status(run)
    logs = list(k8s.logs(run))
    assert st.state is RunState.SUCCEEDED, (st, logs[-60:])
    folder = operators.claim() / name / f"{obj}-{run.run_uid}"
    result: dict[str, Any] = json.loads((folder / "output" / "result.json").read_text())
    assert result["world_size"] == 4 and result["cwd"] == f"/mnt/trainctl/{name}/{obj}-{run.run_uid}/work", result
    pods = {p.metadata.name: p for p in operators.cluster.core.list_namespaced_pod(operators.ns).items}
    assert len(pods) == 2
    names = (
        [f"{obj}-node-0-0.{obj}", f"{obj}-node-0-1.{obj}"]
        if api == "trainjob"
        else [f"{obj}-master-0", f"{obj}-worker-0"]
    )
    for r in result["ranks"]:
        node = r["node"]
        assert (node["NNODES"], node["NPROC_PER_NODE"], node["NODE_RANK"]) == ("2", "2", str(r["rank"] // 2)), node
        assert node["MASTER_ADDR"] == names[0] and node["TRAINCTL_NODE_ADDRS"].split("\n") == names, node
        assert r["torchelastic"], "the user's torchrun started each worker"
    hosts = [r["host"] for r in result["ranks"]]
    assert hosts[0] == hosts[1] != hosts[2] == hosts[3], hosts  # two workers per pod, each pod a host of its own
    assert (folder / "checkpoints" / "model.pt").is_file()
    said = [line for line in logs if "your command once per node: node" in line]
    assert len(said) == 2, logs[-60:]
    print(f"per_node on {api}: 2 pods x torchrun 2 = world 4; master {names[0]}; {said[0]}")

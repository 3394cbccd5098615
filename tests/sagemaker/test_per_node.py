"""`launch: per_node` in SageMaker local mode (`local=true`: containers algo-1/algo-2 of the trainer image, issue
29): the user's own `torchrun --nnodes 2 --nproc-per-node 2 train.py`, shipped as the `code` channel, runs once
per container from the unpacked code with the host's rank, the first host as master and the hosts' names;
the 4 workers train together and rank 0 writes its checkpoint to /opt/ml/checkpoints and its result to
/opt/ml/model."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from trainctl import Job

pytestmark = pytest.mark.slow
COMMAND = ["torchrun", "--nnodes", "2", "--nproc-per-node", "2", "train.py"]


def test_the_users_torchrun_runs_once_per_container(spec: Any, aws: str, trainer_image: Any) -> None:
    job = Job.parse({
        "name": "own-torchrun", "image": trainer_image.ref, "command": COMMAND, "launch": "per_node",
        "code": str(spec.REPO / "tests" / "programs" / "per_node"),
        "resources": {"nodes": 2, "gpus_per_node": 0, "procs_per_node": 2}, "max_runtime": "1h",
        "sagemaker": spec.sagemaker_data(instance_type="ml.c5.xlarge"),
    })  # fmt: skip
    run = job.submit("sagemaker", local=True)
    log = spec.finish(run)
    hosts = Path(run.paths.run_dir)
    result = json.loads((hosts / "algo-1" / "model" / "result.json").read_text())
    assert result["world_size"] == 4 and result["cwd"] == "/opt/ml/code", result
    assert [r["host"] for r in result["ranks"]] == ["algo-1", "algo-1", "algo-2", "algo-2"], result
    for r in result["ranks"]:
        node = r["node"]
        assert (node["NNODES"], node["NPROC_PER_NODE"], node["NODE_RANK"]) == ("2", "2", str(r["rank"] // 2)), node
        assert node["MASTER_ADDR"] == "algo-1" and node["TRAINCTL_NODE_ADDRS"] == "algo-1\nalgo-2", node
        assert r["torchelastic"], "the user's torchrun started each worker"
    assert (hosts / "algo-1" / "checkpoints" / "model.pt").is_file()
    assert log.count("your command once per node: node") == 2, log[-4000:]
    print(f"per_node on SageMaker local mode: 2 containers x torchrun 2 = world 4, loss {result['loss']:.4f}")

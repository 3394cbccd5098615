"""The Kubeflow SDK (`kubeflow` 0.5, TrainerClient) as a client oracle: a platform user's own client lists
trainctl's TrainJobs on the test API server and reads their runtime, node count, steps and status.
It needs kubernetes<36, so it runs from its own venv (.venv-kubeflow, made by scripts/setup.sh)."""

from __future__ import annotations

import json
import os
import subprocess
from typing import Any

import pytest
from k8s_testlib import REPO, Operators
from trainctl import Job
from trainctl.targets.kubernetes import engine

pytestmark = pytest.mark.kapi
KF_PYTHON = REPO / os.environ.get("KF_VENV", ".venv-kubeflow") / "bin" / "python"

LIST = """
import json, sys
from kubeflow.trainer import TrainerClient
from kubeflow.common.types import KubernetesBackendConfig
client = TrainerClient(backend_config=KubernetesBackendConfig(namespace=sys.argv[1], config_file=sys.argv[2]))
out = []
for job in client.list_jobs():
    out.append({"name": job.name, "status": job.status, "num_nodes": job.num_nodes, "runtime": job.runtime.name,
                "framework": job.runtime.trainer.framework,
                "steps": sorted((s.name, s.status) for s in job.steps)})
print(json.dumps(out))
"""


def _sdk_view(ops: Operators) -> list[dict[str, Any]]:
    if not KF_PYTHON.exists():
        message = f"{KF_PYTHON} missing: run scripts/setup.sh (it makes the Kubeflow SDK venv)"
        if os.environ.get("CI") == "true":
            pytest.fail(message)
        pytest.skip(message)
    done = subprocess.run(
        [str(KF_PYTHON), "-c", LIST, ops.ns, str(ops.cluster.kubeconfig)], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr[-3000:]
    result: list[dict[str, Any]] = json.loads(done.stdout)
    return result


def test_the_kubeflow_sdk_lists_trainctls_trainjobs(operators: Operators) -> None:
    job = Job.parse(
        {"name": "hello", "command": ["python", "-c", "print('hello')"], "resources": {"nodes": 2},
         "kubernetes": {"namespace": operators.ns, "pvc": None}}
    )  # fmt: skip
    run = engine.submit(job, kubeconfig=str(operators.cluster.kubeconfig))
    name = run.native_id.partition("/")[2]  # hello-<4 hex>: a new object per run
    (before,) = _sdk_view(operators)
    assert before["name"] == name and before["status"] == "Created" and before["num_nodes"] == 2
    assert before["runtime"] == "trainctl-torch-r0" and before["framework"] == "torch" and before["steps"] == []
    operators.run("trainjob", name, timeout=120)
    (after,) = _sdk_view(operators)
    assert after["status"] == "Complete"
    assert after["steps"] == [["node-0", "Succeeded"], ["node-1", "Succeeded"]], after

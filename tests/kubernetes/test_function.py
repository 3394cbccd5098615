"""A function on Kubernetes: trainctl applies a 2-node TrainJob whose program is the function, the Trainer/JobSet
ports make the pods, the test kubelet runs them (DDP with gloo, one process per pod), and the values and a raised
error come back through the API server (the pods' logs), as they would from outside the cluster."""

from __future__ import annotations

import sys
from pathlib import Path

import cloudpickle
import pytest
from k8s_testlib import Operators
from trainctl import Job, RunState
from trainctl.targets.kubernetes import engine

pytestmark = [pytest.mark.kapi, pytest.mark.slow]
cloudpickle.register_pickle_by_value(sys.modules[__name__])  # the test module does not travel: by value
SCALE = 3


def ddp_sum() -> dict[str, float]:
    import torch
    import torch.distributed as dist

    dist.init_process_group("gloo")
    total = torch.tensor([float(dist.get_rank() + 1)])
    dist.all_reduce(total)
    out = {"rank": dist.get_rank(), "world": dist.get_world_size(), "scaled": total.item() * SCALE}
    dist.destroy_process_group()
    return out


def broken() -> None:
    raise ValueError(f"bad scale {SCALE}")


def _submit(operators: Operators, job: Job) -> object:
    run = engine.submit(job, kubeconfig=str(operators.cluster.kubeconfig))
    operators.run("trainjob", run.native_id.partition("/")[2], timeout=300)
    return run


@pytest.mark.long  # the notebook test below covers the same path (values and an error through the pods' logs)
def test_a_function_runs_on_two_pods_and_its_value_and_error_come_back(operators: Operators) -> None:
    job = Job(name="fn-k8s", resources={"nodes": 2, "procs_per_node": 1},
              kubernetes={"namespace": operators.ns, "api": "trainjob"})  # type: ignore[arg-type]  # fmt: skip
    from trainctl import Run

    run = Run.of(_submit(operators, job.with_function(ddp_sum)))  # type: ignore[arg-type]
    assert engine.status(run).state is RunState.SUCCEEDED, list(engine.logs(run))[-40:]
    assert run.results(timeout=60) == [{"rank": r, "world": 2, "scaled": 9.0} for r in (0, 1)]

    failed = Run.of(_submit(operators, job.with_function(broken)))  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="bad scale 3") as raised:
        failed.result(timeout=60)
    assert "in broken" in raised.value.remote_traceback  # type: ignore[attr-defined]


def test_the_notebook_function_runs_ddp_on_two_pods(operators: Operators, tmp_path: Path) -> None:
    """The notebook of tests/support/function_notebook.py, submitting to Kubernetes; the test drives the
    operator ports and the kubelet between its submit cell and its results cell."""
    notebook = pytest.importorskip("function_notebook")
    fields = (
        "resources={'nodes': 2, 'procs_per_node': 1}, "
        f"kubernetes={{'namespace': {operators.ns!r}, 'api': 'trainjob'}}"
    )

    def drive(run_ids: list[str]) -> None:
        for run_id in run_ids:
            operators.run("trainjob", run_id.partition(":")[2].partition("/")[2], timeout=300)

    options = f", kubeconfig={str(operators.cluster.kubeconfig)!r}"
    notebook.check_came_back(notebook.run_notebook(tmp_path, "kubernetes", fields, options, between=drive))

"""A sweep on Kubernetes (issue 26; the test API server, the Trainer/JobSet port, the test kubelet): a 2x2 grid
of digits becomes 4 TrainJobs labelled with the sweep and their trial, which the CRD schema and strict pod
validation accept; their pods run, and `sweep status` ranks the 4 trials by the accuracy each reached."""

from __future__ import annotations

import shutil
import time

import pytest
from k8s_testlib import REPO, Operators, assert_valid
from trainctl import Job

pytestmark = [pytest.mark.kapi, pytest.mark.slow]


def test_a_sweep_of_4_is_4_labelled_trainjobs_whose_pods_run(operators: Operators) -> None:
    if not (operators.claim() / "data" / "digits").exists():
        shutil.copytree(REPO / "examples" / "data" / "digits", operators.claim() / "data" / "digits")
    job = Job.from_yaml(REPO / "examples" / "digits.yaml").with_overrides(
        [f"kubernetes.namespace={operators.ns}", "trainer.epochs=1", "resources.procs_per_node=1"]
    )
    sweep = job.sweep(
        "kubernetes", options={"kubeconfig": str(operators.cluster.kubeconfig)},
        grid={"trainer.lr": [0.001, 0.003], "trainer.batch_size": [32, 64]}, parallel=2,
    )  # fmt: skip
    ran: list[str] = []
    deadline = time.monotonic() + 900
    while len(ran) < 4 and time.monotonic() < deadline:  # the test kubelet runs one TrainJob's pods at a time
        submitted = [t.run_id for t in sweep.trials() if t.run_id and t.run_id not in ran]
        assert len(ran) + len(submitted) <= 4
        for run_id in submitted:
            operators.run("trainjob", run_id.partition("/")[2], timeout=400)
            ran.append(run_id)
        time.sleep(0.5)
    rows = sweep.wait(timeout=120, poll=1)
    assert [r.state for r in rows] == ["succeeded"] * 4, [(r.index, r.state, r.note) for r in rows]

    value = sweep.id.removeprefix("sweep:")
    found = operators.cluster.custom.list_namespaced_custom_object(
        "trainer.kubeflow.org", "v1alpha1", operators.ns, "trainjobs", label_selector=f"trainctl.io/sweep={value}"
    )["items"]
    assert sorted(f"kubernetes:{operators.ns}/{o['metadata']['name']}" for o in found) == sorted(ran)
    assert sorted(o["metadata"]["labels"]["trainctl.io/trial"] for o in found) == ["0", "1", "2", "3"]
    for obj in found:
        manifest = {k: obj[k] for k in ("apiVersion", "kind", "spec")}
        manifest["metadata"] = {k: obj["metadata"][k] for k in ("name", "namespace", "labels")}
        assert_valid(manifest)
        patch = obj["spec"]["runtimePatches"][0]
        assert "trainctl.io/sweep" in str(patch), "the pods carry the label too"

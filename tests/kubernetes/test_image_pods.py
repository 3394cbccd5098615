"""Kubernetes pods from the trainer image (issue 15): trainctl applies a 2-node TrainJob, the Trainer and
JobSet ports make its pods, and the test kubelet starts each pod's container from
`localhost/trainctl-trainer:<version>-cpu` with podman (runc): the pod's securityContext (user 10001,
read-only root, no capabilities), its volumes (scratch emptyDir, /dev/shm in memory, the PVC bound in with
fsGroup ownership), env and host network. Digits trains to accuracy > 0.9 with world size 2."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
from digits import example_digits  # tests/support
from k8s_testlib import REPO, Cluster, Operators
from run_cli import cli  # tests/support
from trainctl import Job, RunState
from trainctl.targets.kubernetes import engine

pytestmark = [pytest.mark.kapi, pytest.mark.slow]


def test_digits_trains_in_two_pods_from_the_image(
    cluster: Cluster, trainer_image: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ops = Operators(cluster, tmp_path, image_runtime=trainer_image.runtime)
    shutil.copytree(example_digits(), ops.claim() / "data" / "digits")
    job = Job.from_yaml(REPO / "examples" / "digits.yaml").with_overrides(
        ["name=img-tj", f"image={trainer_image.ref}", f"kubernetes.namespace={ops.ns}", "kubernetes.api=trainjob",
         "resources.nodes=2", "resources.procs_per_node=1"]
    )  # fmt: skip
    run = engine.submit(job, kubeconfig=str(cluster.kubeconfig), apply=True)  # the object named as the job
    ops.run("trainjob", "img-tj", timeout=500)
    logs = list(engine.logs(run))
    assert engine.status(run).state is RunState.SUCCEEDED, logs[-40:]
    out = ops.claim() / "img-tj" / "img-tj" / "output"
    summary = json.loads((out / "summary.json").read_text())
    assert summary["world_size"] == 2 and summary["val_accuracy"] > 0.9, summary
    assert {p.stat().st_uid for p in out.rglob("*")} == {10001}, "the trainer wrote as user 10001"

    # what podman ran, per pod (read before each container was removed)
    ran = [c for c in ops.runner.ran.values() if c]
    assert len(ran) == 2, ops.runner.ran.keys()
    for c in ran:
        assert c["ImageName"] == trainer_image.ref and c["Image"] == trainer_image.id
        assert c["Config"]["User"] == "10001:10001" and c["HostConfig"]["ReadonlyRootfs"] is True
        assert c["HostConfig"]["NetworkMode"] == "host" and c["State"]["ExitCode"] == 0
        assert "10001" in [str(g) for g in c["HostConfig"]["GroupAdd"]]  # fsGroup
        assert not c["BoundingCaps"], c["BoundingCaps"]  # capabilities.drop [ALL] (podman's default keeps 11)
        mounts = {m["Destination"]: m for m in c["Mounts"]}
        assert {"/tmp", "/home/trainer", "/workspace", "/mnt/trainctl"} <= set(mounts)
        assert mounts["/mnt/trainctl"]["Source"] == str(ops.claim()) and mounts["/mnt/trainctl"]["RW"] is True
        assert "type=tmpfs,destination=/dev/shm" in " ".join(c["Config"].get("CreateCommand") or [])
        env = dict(e.split("=", 1) for e in c["Config"]["Env"])
        assert env["PET_NNODES"] == "2" and env["PET_MASTER_ADDR"] == "img-tj-node-0-0.img-tj"

    # status reads the image ID each pod's kubelet reported (the CRI's `sha256:<image id>` of a local image):
    # both pods, the one image the session built
    st = engine.status(run)
    image = f"sha256:{trainer_image.id}"
    assert len(st.images.ids) == 2 and set(st.images.ids.values()) == {image}, st.details
    assert st.images.same == image and st.images.warning is None
    monkeypatch.setenv("KUBECONFIG", str(cluster.kubeconfig))
    shown = cli("k8s", "status", "img-tj", "-n", ops.ns)
    pods = ", ".join(sorted(st.images.ids))
    assert shown.exit_code == 0 and f"  image ID: {image} (all of {pods})" in shown.stdout.splitlines(), shown.stdout
    print(f"k8s pods from image {trainer_image.id[:12]}: val_accuracy {summary['val_accuracy']:.4f} world 2; "
          f"status: {st.images.ids}")  # fmt: skip


def test_code_job_runs_from_the_image_with_its_configmap(cluster: Cluster, trainer_image: Any, tmp_path: Path) -> None:
    """The code-job example's bundle, a ConfigMap mounted read-only into each image container: the image's
    launcher (as 10001, read-only root) verifies its sha256, unpacks it into the run's work/ on the PVC and trains."""
    from trainctl.submit.bundle import bundle_for

    ops = Operators(cluster, tmp_path, image_runtime=trainer_image.runtime)
    job = Job.from_yaml(REPO / "examples" / "code-job" / "job.yaml").with_overrides(
        ["name=img-code", f"image={trainer_image.ref}", f"kubernetes.namespace={ops.ns}", "kubernetes.api=trainjob",
         "resources.nodes=2", "resources.procs_per_node=1"]
    )  # fmt: skip
    bundle = bundle_for(job)
    assert bundle is not None
    run = engine.submit(job, kubeconfig=str(cluster.kubeconfig), apply=True)
    ops.run("trainjob", "img-code", timeout=400)
    assert engine.status(run).state is RunState.SUCCEEDED, list(engine.logs(run))[-40:]
    result = json.loads((ops.claim() / "img-code" / "img-code" / "output" / "result.json").read_text())
    assert result["world_size"] == 2 and result["code_sha256"] == bundle.sha256, result
    ran = [c for c in ops.runner.ran.values() if c]
    assert len(ran) == 2
    for c in ran:
        mounts = {m["Destination"]: m for m in c["Mounts"]}
        assert mounts["/opt/trainctl/code-bundle"]["RW"] is False and c["HostConfig"]["ReadonlyRootfs"] is True
        assert c["Config"]["User"] == "10001:10001" and c["State"]["ExitCode"] == 0

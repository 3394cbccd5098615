"""`code:` on Kubernetes: the bundle travels in a ConfigMap owned by the job, mounted into every pod.

Against kapi (a real API server): the ConfigMap is created with the job as its owner and holds the exact
bundle; the launcher, given the pod's env and the ConfigMap's bytes where the volume mounts them,
verifies the hash, unpacks and runs the example folder's train.py (2 processes).
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from k8s_testlib import REPO, Operators
from trainctl import Job, JobError, RunState
from trainctl.submit.bundle import bundle_for, prepare
from trainctl.targets.kubernetes import engine
from trainctl.targets.kubernetes.code import CONFIGMAP_LIMIT, MOUNT
from trainctl.targets.kubernetes.kinds import PYTORCHJOB
from trainctl.targets.kubernetes.render import build_manifest


def _job(tmp_path: Path, name: str = "code-job") -> Job:
    folder = tmp_path / "code-job"
    if not folder.exists():
        shutil.copytree(REPO / "examples" / "code-job", folder)
    sets = [f"name={name}", "kubernetes.namespace=e2e", "kubernetes.api=pytorchjob"]
    return prepare(Job.from_yaml(folder / "job.yaml").with_overrides(sets))  # the bundle step render reads


def _container(manifest: dict) -> dict:  # type: ignore[type-arg]
    replicas = manifest["spec"]["pytorchReplicaSpecs"]
    return next(iter(replicas.values()))["template"]


def test_render_mounts_the_configmap_and_names_the_hash(tmp_path: Path) -> None:
    job = _job(tmp_path)
    bundle = bundle_for(job)
    assert bundle is not None
    template = _container(build_manifest(job))
    (container,) = template["spec"]["containers"]
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert env["TRAINER_CODE_SHA256"] == bundle.sha256
    # unpacked into the run's own work/ folder on the PVC (the program's working folder)
    assert (
        env["TRAINER_CODE_BUNDLE"] == f"{MOUNT}/code.tar.gz"
        and env["TRAINER_CODE_DIR"] == env["TRAINCTL_RUN_DIR"] + "/work"
    )
    assert container["command"][1:3] == ["--workdir", env["TRAINER_CODE_DIR"]]
    volume = next(v for v in template["spec"]["volumes"] if v["name"] == "code-bundle")
    assert volume["configMap"]["name"] == f"code-job-code-{bundle.sha256[:12]}"
    assert {"name": "code-bundle", "mountPath": MOUNT, "readOnly": True} in container["volumeMounts"]
    notes = " ".join(job.render("kubernetes").notes)
    assert bundle.sha256 in notes and "ConfigMap code-job-code-" in notes
    trainjob = job.with_overrides(["kubernetes.api=trainjob"]).render("kubernetes").text
    assert f"code-job-code-{bundle.sha256[:12]}" in trainjob and bundle.sha256 in trainjob


def test_a_bundle_over_the_configmap_limit_is_refused(tmp_path: Path) -> None:
    _job(tmp_path)  # the folder
    (tmp_path / "code-job" / "src" / "weights.bin").write_bytes(os.urandom(CONFIGMAP_LIMIT + 10))
    with pytest.raises(JobError) as err:
        build_manifest(_job(tmp_path))
    assert "1,048,576" in str(err.value) and "weights.bin" in str(err.value)


@pytest.mark.kapi
@pytest.mark.slow
def test_configmap_owned_by_the_job_feeds_the_launcher(kubeconfig: Path, tmp_path: Path) -> None:
    job = _job(tmp_path, "code-on-k8s")
    bundle = bundle_for(job)
    assert bundle is not None
    run = engine.submit(job, apply=True)
    cluster = engine.connect(None, "e2e")
    owner = engine.get_job(cluster, "code-on-k8s", PYTORCHJOB)
    assert owner is not None
    found = cluster.core().read_namespaced_config_map(f"code-on-k8s-code-{bundle.sha256[:12]}", "e2e")
    cm = cluster.api.sanitize_for_serialization(found)
    data = base64.b64decode(cm["binaryData"]["code.tar.gz"])
    assert hashlib.sha256(data).hexdigest() == bundle.sha256 and cm["immutable"] is True
    (ref,) = cm["metadata"]["ownerReferences"]
    assert ref["uid"] == owner["metadata"]["uid"] and ref["kind"] == owner["kind"]
    assert engine.submit(job, apply=True).handle.apply == "unchanged"  # a second apply keeps the one ConfigMap

    # What a pod does with it: the ConfigMap's bytes where the volume mounts them, the container's env.
    (container,) = _container(owner)["spec"]["containers"]
    mount, pvc = tmp_path / "mount", tmp_path / "pvc"
    mount.mkdir()
    (mount / "code.tar.gz").write_bytes(data)
    run_dir = run.paths.run_dir

    def here(text: str) -> str:
        return text.replace(MOUNT, str(mount)).replace(run_dir, str(pvc))

    # the values as written (TRAINCTL_NODE_NAME comes from the downward API, which a plain process has not)
    env = {e["name"]: here(e["value"]) for e in container["env"] if "value" in e}
    env = {**env, "PATH": f"{Path(sys.executable).parent}:/usr/bin:/bin", "TRAINER_OUTPUT_DIR": str(tmp_path / "out")}
    argv = [here(a) if a != "python" else sys.executable for a in container["command"]]
    unpack = pvc / "work"
    done = subprocess.run(argv, env=env, cwd=tmp_path, capture_output=True, text=True, timeout=180)
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads((tmp_path / "out" / "result.json").read_text())
    assert result["world_size"] == 2 and result["code_dir"] == str(unpack) and result["code_sha256"] == bundle.sha256
    engine.cancel(run)


@pytest.mark.kapi
@pytest.mark.slow
def test_code_job_runs_as_pods_of_a_two_node_trainjob(operators: Operators) -> None:
    """The whole path: trainctl applies the TrainJob and its ConfigMap; the Trainer/JobSet ports make
    the pods; the test kubelet mounts the ConfigMap read-only from the API server's object; each pod's
    launcher verifies the bundle's sha256, unpacks it into the run's work/ folder on the PVC (both nodes into
    the one folder: the first rename wins) and trains there (world size 2)."""
    job = Job.from_yaml(REPO / "examples" / "code-job" / "job.yaml").with_overrides(
        ["name=code-tj", f"kubernetes.namespace={operators.ns}", "kubernetes.api=trainjob",
         "resources.nodes=2", "resources.procs_per_node=1"]
    )  # fmt: skip
    bundle = bundle_for(job)
    assert bundle is not None
    run = engine.submit(job, kubeconfig=str(operators.cluster.kubeconfig))
    name = run.native_id.partition("/")[2]
    assert name.startswith("code-tj-") and len(name) == len("code-tj-") + 4  # a new object per run
    operators.run("trainjob", name, timeout=300)
    assert engine.status(run).state is RunState.SUCCEEDED, list(engine.logs(run))[-40:]
    pods = operators.cluster.core.list_namespaced_pod(operators.ns).items
    assert len(pods) == 2
    for pod in pods:
        spec = operators.cluster.api.sanitize_for_serialization(pod)
        mounts = operators.runner.mounts(spec, spec["spec"]["containers"][0])
        assert [ro for _, dst, ro in mounts if dst == MOUNT] == [True]  # mounted read-only
        volumes = {v.name: v for v in pod.spec.volumes}
        assert volumes["code-bundle"].config_map.name == f"{name}-code-{bundle.sha256[:12]}"
        volumes_dir = operators.runner.workdir / "pods" / pod.metadata.name / "volumes"
        assert hashlib.sha256((volumes_dir / "code-bundle" / "code.tar.gz").read_bytes()).hexdigest() == bundle.sha256
    # the launchers verified it and unpacked it into the run's own work/ folder on the PVC
    folder = f"{name}-{run.run_uid}"  # the object and the run's uid
    unpacked = operators.claim() / "code-tj" / folder / "work"
    assert (unpacked / ".trainctl-code.sha256").read_text().strip() == bundle.sha256
    assert (unpacked / "train.py").is_file() and (unpacked / "helper.py").is_file()
    result = json.loads((operators.claim() / "code-tj" / folder / "output" / "result.json").read_text())
    assert result["code_dir"] == f"/mnt/trainctl/code-tj/{folder}/work" == run.paths.work_dir
    assert result["world_size"] == 2 and result["code_sha256"] == bundle.sha256
    assert "world 2" in "\n".join(engine.logs(run))

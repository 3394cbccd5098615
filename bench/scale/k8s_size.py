"""Kubernetes at 1,024 nodes: `trainctl status` of a 1,024-pod TrainJob on the real API server.

The test API server (../shared/tools/kapi/up.sh: kube-apiserver's code with etcd, the Kubeflow CRDs, no
scheduler or kubelet) holds the TrainJob trainctl submits (targets/kubernetes/engine.py `submit`) and 1,024
pods created as objects, as the JobSet controller would (labels and the completion index the engine reads:
kinds.py `TRAINJOB`, objects.py `pods_of`). They stay Pending (no kubelet), so status takes its longest
path: the job, one list of its pods by label selector, one list of the namespace's events
(engine.py `_object_status`). Timed as a user meets it: `trainctl status RUN`, a fresh process.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from functools import partial
from typing import Any

import yaml

from ..common import ROOT, VENV_BIN, WORK, Figure, base_env, figure, interleaved, unavailable, wall

NAME = "k8s"
PODS = 1024
KAPI = ROOT.parent / "shared" / "tools" / "kapi"


def run_k8s(quick: bool = False) -> list[Figure]:
    label = f"trainctl status of a {PODS}-pod TrainJob (kapi)"
    if quick:  # starting the API server and creating 1,024 pods is a minute: full runs only
        return [unavailable(NAME, label, "full runs only (python -m bench --only k8s)", "< 2", "s")]
    if not (KAPI / "up.sh").is_file():
        return [unavailable(NAME, label, f"no test API server at {KAPI}", "< 2", "s")]
    directory = WORK / "kapi"
    shutil.rmtree(directory, ignore_errors=True)
    subprocess.run(["bash", str(KAPI / "up.sh"), str(directory)], check=True, capture_output=True, timeout=180)
    try:
        return _measure(directory, label)
    finally:
        subprocess.run(["bash", str(KAPI / "down.sh"), str(directory)], capture_output=True, timeout=60)


def _measure(directory: Any, label: str) -> list[Figure]:
    from kubernetes import client, config
    from trainctl import Job
    from trainctl.run import Run
    from trainctl.runs.store import RunStore
    from trainctl.targets.kubernetes import engine
    from trainctl.targets.kubernetes import trainjob as tj
    from trainctl.targets.kubernetes.kinds import TRAINJOB

    kubeconfig, home = str(directory / "kubeconfig"), str(WORK / "k8s-home")
    shutil.rmtree(home, ignore_errors=True)
    saved = {k: os.environ.get(k) for k in ("KUBECONFIG", "TRAINCTL_HOME")}
    os.environ.update(KUBECONFIG=kubeconfig, TRAINCTL_HOME=home)
    try:
        api = config.new_client_from_config(config_file=kubeconfig)
        custom, core = client.CustomObjectsApi(api), client.CoreV1Api(api)
        for rt in yaml.safe_load_all((ROOT / "k8s" / "trainingruntimes.yaml").read_text()):
            custom.create_cluster_custom_object("trainer.kubeflow.org", "v1alpha1", "clustertrainingruntimes", rt)
        job = Job.from_yaml(ROOT / "examples" / "digits.yaml").with_overrides(
            ["name=big", "kubernetes.namespace=scale", f"resources.nodes={PODS}"]
        )
        run = Run.of(engine.submit(job, apply=True))
        RunStore().record(run)
        for i in range(PODS):
            pod = {"metadata": {"name": f"big-node-0-{i}", "labels": {TRAINJOB.pod_label: "big"},
                                "annotations": {tj.COMPLETION_INDEX: str(i)}},
                   "spec": {"containers": [{"name": "node", "image": "trainer:x"}]}}  # fmt: skip
            core.create_namespaced_pod("scale", pod)
    finally:
        for k, v in saved.items():
            os.environ.pop(k, None) if v is None else os.environ.__setitem__(k, v)
    env = base_env(KUBECONFIG=kubeconfig, TRAINCTL_HOME=home)
    t = interleaved({"status": partial(wall, [str(VENV_BIN / "trainctl"), "status", run.id], env)}, 3)
    shutil.rmtree(home, ignore_errors=True)
    return [figure(NAME, label, t["status"], unit="s", target="< 2",
                   note="a fresh process: the job, one pod list by label selector, one event list",
                   detail={"load_avg": round(os.getloadavg()[0], 2)})]  # fmt: skip

"""Kubernetes at 1,024 nodes: `trainctl status` and `logs --rank` of a 1,024-pod TrainJob on the real API
server, and the retry driver's memory of those pods (its list, then its watch).

The test API server (../shared/tools/kapi/up.sh: kube-apiserver's code with etcd, the Kubeflow CRDs, no
scheduler or kubelet) holds the TrainJob trainctl submits (targets/kubernetes/engine.py `submit`) and 1,024
pods created as objects, as the JobSet controller would (labels and the completion index the engine reads:
kinds.py `TRAINJOB`, objects.py `pods_of`). They stay Pending (no kubelet), so status takes its longest
path: the job, one list of its pods by label selector, one list of the namespace's events
(engine.py `_object_status`). Timed as a user meets it: `trainctl status RUN`, a fresh process; `trainctl
k8s logs NAME --rank 1000` the same (one list, then one pod's log, which kapi serves from the pod's
`fake.kubelet/log` annotation as a kubelet would serve its file). The retry driver's `PodMemory`
(reconcile.py) lists the namespace's trainctl pods once and then watches them: timed are its first list of
the 1,024 pods and how long one pod's change, written to the API server, takes to reach it.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from functools import partial
from typing import Any

import yaml

from ..common import ROOT, VENV_BIN, WORK, Figure, base_env, figure, interleaved, unavailable, wall

NAME = "k8s"
PODS = 1024
KAPI = ROOT.parent / "shared" / "tools" / "kapi"
LOG = "fake.kubelet/log"  # kapi's pods/log: the pod's log text (../shared/tools/kapi/main.go `logAnnotation`)


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
    from trainctl.targets.kubernetes.pod import MANAGED_BY

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
            pod = {"metadata": {"name": f"big-node-0-{i}", "labels": {TRAINJOB.pod_label: "big", **MANAGED_BY},
                                "annotations": {tj.COMPLETION_INDEX: str(i), LOG: f"node {i} says hello\n"}},
                   "spec": {"containers": [{"name": "node", "image": "trainer:x"}]}}  # fmt: skip
            core.create_namespaced_pod("scale", pod)
        listed_s, seen_s = _pod_memory(core, kubeconfig)
    finally:
        for k, v in saved.items():
            os.environ.pop(k, None) if v is None else os.environ.__setitem__(k, v)
    env = base_env(KUBECONFIG=kubeconfig, TRAINCTL_HOME=home)
    trainctl = str(VENV_BIN / "trainctl")
    namespace, obj = run.native_id.split("/", 1)
    logs = [trainctl, "k8s", "logs", obj, "--namespace", namespace, "--rank", "1000"]
    said = subprocess.run(logs, env=env, capture_output=True, text=True)
    if "node 1000 says hello" not in said.stdout or "node 999 " in said.stdout:
        raise RuntimeError(f"logs --rank 1000 printed {said.stdout[-500:]!r} {said.stderr[-1500:]!r}")
    t = interleaved({"status": partial(wall, [trainctl, "status", run.id], env),
                     "logs": partial(wall, logs, env)}, 3)  # fmt: skip
    shutil.rmtree(home, ignore_errors=True)
    detail = {"load_avg": round(os.getloadavg()[0], 2)}
    return [figure(NAME, label, t["status"], unit="s", target="< 2", detail=detail,
                   note="a fresh process: the job, one pod list by label selector, one event list"),
            figure(NAME, f"trainctl k8s logs --rank 1000 of a {PODS}-pod TrainJob (kapi)", t["logs"], unit="s",
                   target="< 2", detail=detail, note="a fresh process: the job, one pod list, one pod's log"),
            figure(NAME, f"retry driver: first list of {PODS} pods (kapi)", listed_s, unit="s", detail=detail,
                   note="reconcile.PodMemory: one list by label selector, then a watch from its version"),
            figure(NAME, f"retry driver: a pod's change seen through the watch, {PODS} pods (kapi)", seen_s,
                   unit="s", detail=detail, note="from the status write to the driver's memory holding it")]  # fmt: skip


def _pod_memory(core: Any, kubeconfig: str) -> tuple[list[float], list[float]]:
    """The driver's PodMemory on the namespace: its first list, then 5 pods' status changes through its watch."""
    from trainctl.targets.kubernetes.cluster import connect
    from trainctl.targets.kubernetes.kinds import TRAINJOB
    from trainctl.targets.kubernetes.reconcile import PodMemory

    t0 = time.perf_counter()
    memory = PodMemory(connect(None, "scale", kubeconfig), "scale", lambda _: None).start()
    if not memory.listed.wait(120):
        raise RuntimeError("the driver's pod memory did not list the pods in 120 s")
    listed = [time.perf_counter() - t0]
    seen: list[float] = []
    try:
        for i in (0, 255, 511, 767, 1023):
            name = f"big-node-0-{i}"
            t0 = time.perf_counter()
            core.patch_namespaced_pod(
                name, "scale", {"status": {"phase": "Failed", "reason": "NodeLost"}}
            )  # kapi: no pods/status
            while not any(p["metadata"]["name"] == name and p.get("status", {}).get("reason") == "NodeLost"
                          for p in memory.pods("scale", TRAINJOB, "big")):  # fmt: skip
                if time.perf_counter() - t0 > 60:
                    raise RuntimeError(f"the driver's pod memory did not see {name} fail in 60 s")
                time.sleep(0.01)
            seen.append(time.perf_counter() - t0)
    finally:
        memory.stopped.set()
    return listed, seen

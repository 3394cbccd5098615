"""Kubeflow Training Operator v1.9 (github.com/kubeflow/trainer, tag v1.9.4), ported for one PyTorchJob:
defaults, the pods it creates (names, labels, env, init container, restart policy), its failure
handling and its conditions. Each rule cites the upstream file and function. Pods run via `PodRunner`.
"""

from __future__ import annotations

import copy
import datetime
import time
from typing import Any

from pod_runner import PodRunner, RunningPod

GROUP, VERSION, PLURAL = "kubeflow.org", "v1", "pytorchjobs"
DEFAULT_PORT_NAME, DEFAULT_PORT = "pytorchjob-port", 23456  # pkg/apis/kubeflow.org/v1/pytorch_types.go
# pkg/controller.v1/pytorch/initcontainer.go initContainerTemplate (a Go template; the config defaults
# are image alpine:3.10 and 100 tries, cmd/training-operator.v1/main.go flags).
INIT_CONTAINER_TEMPLATE = """
- name: init-pytorch
  image: {{.InitContainerImage}}
  imagePullPolicy: IfNotPresent
  resources:
    limits:
      cpu: 100m
      memory: 20Mi
    requests:
      cpu: 50m
      memory: 10Mi
  command: ['sh', '-c', 'err=1;for i in $(seq {{.MaxTries}}); do if nslookup {{.MasterAddr}}; then err=0 && break; fi;echo waiting for master; sleep 2; done; exit $err']"""


def set_defaults(job: dict[str, Any]) -> dict[str, Any]:
    """pytorch_defaults.go SetDefaults_PyTorchJob: replicas 1, restartPolicy OnFailure, the
    pytorchjob-port 23456 on the `pytorch` container, elastic min/max from each other or the Workers."""
    job = copy.deepcopy(job)
    spec = job["spec"]
    spec.setdefault("runPolicy", {}).setdefault("cleanPodPolicy", "None")
    for rspec in spec["pytorchReplicaSpecs"].values():
        rspec.setdefault("replicas", 1)
        rspec.setdefault("restartPolicy", "OnFailure")
        container = next(c for c in rspec["template"]["spec"]["containers"] if c["name"] == "pytorch")
        if not any(p.get("name") == DEFAULT_PORT_NAME for p in container.get("ports") or []):
            container.setdefault("ports", []).append({"name": DEFAULT_PORT_NAME, "containerPort": DEFAULT_PORT})
    elastic = spec.get("elasticPolicy")
    if elastic is not None:  # setElasticPolicy
        workers = spec["pytorchReplicaSpecs"]["Worker"]["replicas"]
        elastic.setdefault("maxReplicas", elastic.get("minReplicas", workers))
        elastic.setdefault("minReplicas", elastic["maxReplicas"])
    if elastic is None or elastic.get("nProcPerNode") is None:  # setDefaultNprocPerNode
        spec.setdefault("nprocPerNode", "auto")
    return job


def replica_name(job: str, rtype: str, index: int) -> str:
    """envvar.go replicaName."""
    return f"{job}-{rtype.lower()}-{index}"


def _port(job: dict[str, Any], rtype: str) -> int:
    """envvar.go getPortFromPyTorchJob: the `pytorchjob-port` of the `pytorch` container."""
    for c in job["spec"]["pytorchReplicaSpecs"][rtype]["template"]["spec"]["containers"]:
        if c["name"] == "pytorch":
            for p in c.get("ports") or []:
                if p.get("name") == DEFAULT_PORT_NAME:
                    return int(p["containerPort"])
    raise ValueError("port not found")


def pod_env(job: dict[str, Any], rtype: str, index: int) -> list[dict[str, Any]]:
    """envvar.go setPodEnv (with master.go and elastic.go's generators), appended to each container."""
    spec = job["spec"]
    specs = spec["pytorchReplicaSpecs"]
    name = job["metadata"]["name"]
    env = [{"name": "PYTHONUNBUFFERED", "value": "1"}]
    total = sum(r["replicas"] for r in specs.values())  # getTotalReplicas
    try:
        nproc = int(spec.get("nprocPerNode"))  # getNprocPerNodeInt
    except (TypeError, ValueError):
        nproc = 1
    if "Master" in specs:
        port, addr = _port(job, "Master"), replica_name(name, "Master", 0)
        env += [{"name": "MASTER_PORT", "value": str(port)}, {"name": "PET_MASTER_PORT", "value": str(port)},
                {"name": "MASTER_ADDR", "value": addr}, {"name": "PET_MASTER_ADDR", "value": addr}]  # fmt: skip
        rank = index + 1 if rtype == "Worker" else index
        env += [{"name": "WORLD_SIZE", "value": str(total * nproc)}, {"name": "RANK", "value": str(rank)},
                {"name": "PET_NODE_RANK", "value": str(rank)}]  # fmt: skip
    if spec.get("nprocPerNode") is not None:
        env.append({"name": "PET_NPROC_PER_NODE", "value": str(spec["nprocPerNode"])})
    elastic = spec.get("elasticPolicy")
    if elastic is not None:  # elastic.go ElasticEnvVarGenerator.Generate
        host = elastic.get("rdzvHost") or f"{name}-worker-0"
        port = elastic.get("rdzvPort") or _port(job, "Worker")
        env.append({"name": "PET_RDZV_ENDPOINT", "value": f"{host}:{port}"})
        env.append({"name": "PET_RDZV_BACKEND", "value": elastic.get("rdzvBackend", "c10d")})
        env.append({"name": "PET_NNODES", "value": f"{elastic['minReplicas']}:{elastic['maxReplicas']}"})
        if elastic.get("maxRestarts") is not None:
            env.append({"name": "PET_MAX_RESTARTS", "value": str(elastic["maxRestarts"])})
        if elastic.get("rdzvId") is not None:
            env.append({"name": "PET_RDZV_ID", "value": elastic["rdzvId"]})
    else:
        env.append({"name": "PET_NNODES", "value": str(total)})
    return env


def init_containers(job: dict[str, Any], rtype: str, template: str | None = None) -> list[dict[str, Any]]:
    """initcontainer.go setInitContainer / GetInitContainer: only Worker pods of a job with a Master get
    the template (`template`: the text of --pytorch-init-container-template-file, else the built-in one),
    executed with the image, tries and master address, then parsed as a list of containers."""
    import yaml

    if "Master" not in job["spec"]["pytorchReplicaSpecs"] or rtype != "Worker":
        return []
    master = replica_name(job["metadata"]["name"], "Master", 0)
    text = (template or INIT_CONTAINER_TEMPLATE).replace("{{.InitContainerImage}}", "alpine:3.10")
    text = text.replace("{{.MaxTries}}", "100").replace("{{.MasterAddr}}", master)
    containers: list[dict[str, Any]] = yaml.safe_load(text)
    return containers


def pod_for(job: dict[str, Any], rtype: str, index: int, init_template: str | None = None) -> dict[str, Any]:
    """common/pod.go createNewPod: labels, name, SetClusterSpec (env, init container), restart policy."""
    rspec = job["spec"]["pytorchReplicaSpecs"][rtype]
    name = job["metadata"]["name"]
    tmpl = copy.deepcopy(rspec["template"])
    labels = {
        "training.kubeflow.org/operator-name": "pytorchjob-controller",
        "training.kubeflow.org/job-name": name,
        "training.kubeflow.org/replica-type": rtype.lower(),
        "training.kubeflow.org/replica-index": str(index),
    }
    masters = "Master" in job["spec"]["pytorchReplicaSpecs"]
    if (masters and rtype == "Master") or (not masters and rtype == "Worker" and index == 0):  # IsMasterRole
        labels["training.kubeflow.org/job-role"] = "master"
    meta = tmpl.setdefault("metadata", {})
    meta["name"] = replica_name(name, rtype, index)  # GenGeneralName
    meta["labels"] = {**(meta.get("labels") or {}), **labels}
    for c in tmpl["spec"]["containers"]:
        c["env"] = (c.get("env") or []) + pod_env(job, rtype, index)
    tmpl["spec"]["initContainers"] = (tmpl["spec"].get("initContainers") or []) + init_containers(
        job, rtype, init_template
    )
    # core/pod.go SetRestartPolicy: ExitCode is not a pod policy: Never, the operator decides
    policy = rspec["restartPolicy"]
    tmpl["spec"]["restartPolicy"] = "Never" if policy == "ExitCode" else policy
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": tmpl["spec"]}


def _now() -> str:
    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


class PyTorchJobController:
    """The PyTorchJob reconciler for one job on the test API server, with pods run by the runner."""

    def __init__(self, api_client: Any, namespace: str, runner: PodRunner, init_template: str | None = None) -> None:
        from kubernetes import client

        self.init_template = init_template
        self.core = client.CoreV1Api(api_client)
        self.custom = client.CustomObjectsApi(api_client)
        self.ns = namespace
        self.runner = runner
        self.pods: dict[tuple[str, int], RunningPod] = {}
        self.restarts = 0
        self.conditions: list[dict[str, Any]] = []

    def _condition(self, ctype: str, reason: str, message: str, name: str) -> None:
        """util.UpdateJobConditions: one entry per type; Running/Restarting turn False as the job moves on."""
        for c in self.conditions:
            if c["type"] in ("Running", "Restarting") and c["type"] != ctype:
                c["status"] = "False"
        self.conditions = [c for c in self.conditions if c["type"] != ctype]
        self.conditions.append({"type": ctype, "status": "True", "reason": reason, "message": message,
                                "lastUpdateTime": _now(), "lastTransitionTime": _now()})  # fmt: skip
        self.custom.patch_namespaced_custom_object_status(
            GROUP, VERSION, self.ns, PLURAL, name, {"status": {"conditions": self.conditions}}
        )

    def _start(self, job: dict[str, Any], rtype: str, index: int) -> None:
        created = self.core.create_namespaced_pod(self.ns, pod_for(job, rtype, index, self.init_template))
        self.pods[(rtype, index)] = self.runner.start(self.core.api_client.sanitize_for_serialization(created))

    def run(self, name: str, timeout: float = 600) -> dict[str, Any]:
        job = set_defaults(self.custom.get_namespaced_custom_object(GROUP, VERSION, self.ns, PLURAL, name))
        specs = job["spec"]["pytorchReplicaSpecs"]
        self._condition("Created", "PyTorchJobCreated", f"PyTorchJob {name} is created.", name)
        for rtype in ("Master", "Worker"):
            for index in range(specs.get(rtype, {}).get("replicas", 0)):
                self._start(job, rtype, index)
        self._condition("Running", "PyTorchJobRunning", f"PyTorchJob {name} is running.", name)
        backoff = job["spec"]["runPolicy"].get("backoffLimit")
        deadline = time.monotonic() + timeout
        done: set[tuple[str, int]] = set()
        while True:
            if time.monotonic() > deadline:
                for rp in self.pods.values():
                    self.runner.kill(rp)
                raise TimeoutError(f"PyTorchJob {name} did not finish in {timeout}s")
            time.sleep(0.3)
            for key, rp in list(self.pods.items()):
                if key in done:
                    continue
                code = self.runner.poll(rp)
                if code is None:
                    continue
                policy = specs[key[0]]["restartPolicy"]
                if code == 0:
                    self.runner.finish(rp, "Succeeded")
                    done.add(key)
                elif policy in ("OnFailure", "Always"):  # the kubelet restarts the container in place
                    self.runner.restart(rp)
                    self.restarts += 1
                elif policy == "ExitCode" and code >= 128:  # common/pod.go ReconcilePods: delete, recreate
                    self.runner.finish(rp, "Failed")
                    self.core.delete_namespaced_pod(rp.name, self.ns, _preload_content=False)
                    self._start(job, *key)
                    self.restarts += 1
                    self._condition("Restarting", "PyTorchJobRestarting", f"job {name} is restarting because "
                                    f"{key[0]} replica(s) failed.", name)  # fmt: skip
                else:
                    self.runner.finish(rp, "Failed")
                    return self._end(name, "Failed", "PyTorchJobFailed",
                                     f"PyTorchJob {name} is failed because 1 {key[0]} replica(s) failed.")  # fmt: skip
            # core/job.go PastBackoffLimit: container restarts of running pods, summed
            if backoff is not None and any(p in ("OnFailure", "Always", "ExitCode") for p in
                                           (s["restartPolicy"] for s in specs.values())):  # fmt: skip
                restarts = sum(rp.restarts for k, rp in self.pods.items() if k not in done)
                if restarts > 0 if backoff == 0 else restarts >= backoff:
                    return self._end(name, "Failed", "BackoffLimitExceeded",
                                     f"PyTorchJob {name} has failed because it has reached the specified backoff limit")  # fmt: skip
            # pytorchjob_controller.go UpdateJobStatus: the Master's success, else every Worker's (elastic: any)
            if "Master" in specs:
                if ("Master", 0) in done:
                    return self._end(
                        name, "Succeeded", "PyTorchJobSucceeded", f"PyTorchJob {name} is successfully completed."
                    )
            else:
                workers = [k for k in self.pods if k[0] == "Worker"]
                ok = sum(1 for k in workers if k in done)
                if ok == len(workers) or (job["spec"].get("elasticPolicy") and ok > 0):
                    return self._end(
                        name, "Succeeded", "PyTorchJobSucceeded", f"PyTorchJob {self.ns}/{name} successfully completed."
                    )

    def _end(self, name: str, ctype: str, reason: str, message: str) -> dict[str, Any]:
        # cleanPodPolicy None leaves the other pods alone: a succeeded job's other pods finish on their own.
        deadline = time.monotonic() + (120 if ctype == "Succeeded" else 0)
        for rp in self.pods.values():
            while rp.exit_code is None and self.runner.poll(rp) is None and time.monotonic() < deadline:
                time.sleep(0.3)
            if rp.exit_code is None:
                self.runner.kill(rp)
                self.runner.poll(rp)
            if rp.proc is not None:
                self.runner.finish(rp, "Succeeded" if rp.exit_code == 0 else "Failed")
        self._condition(ctype, reason, message, name)
        result: dict[str, Any] = self.custom.get_namespaced_custom_object(GROUP, VERSION, self.ns, PLURAL, name)
        return result


class Steps:
    """Single steps of the ported operator (pods from `pod_for`, conditions by UpdateJobConditions) and of
    a kubelet (phase, log), for tests that walk a PyTorchJob through states one at a time."""

    def __init__(self, kubeconfig: str, namespace: str) -> None:
        from kubernetes import client, config

        api = config.new_client_from_config(config_file=kubeconfig)
        self.core = client.CoreV1Api(api)
        self.custom = client.CustomObjectsApi(api)
        self.ns = namespace

    def create_pod(self, job: str, rtype: str, index: int, log: str = "", phase: str = "Pending") -> str:
        obj = set_defaults(self.custom.get_namespaced_custom_object(GROUP, VERSION, self.ns, PLURAL, job))
        pod = pod_for(obj, rtype if rtype in obj["spec"]["pytorchReplicaSpecs"] else "Worker", index)
        pod["metadata"]["name"] = replica_name(job, rtype, index)
        pod["metadata"]["labels"]["training.kubeflow.org/replica-type"] = rtype.lower()
        pod["metadata"].setdefault("annotations", {})["fake.kubelet/log"] = log
        self.core.create_namespaced_pod(self.ns, pod)
        self.set_phase(pod["metadata"]["name"], phase)
        return str(pod["metadata"]["name"])

    def set_phase(self, pod: str, phase: str) -> None:
        # kapi stores pods without a status subresource: the phase is written on the pod itself.
        self.core.patch_namespaced_pod(pod, self.ns, {"status": {"phase": phase}})

    def set_log(self, pod: str, text: str) -> None:
        self.core.patch_namespaced_pod(pod, self.ns, {"metadata": {"annotations": {"fake.kubelet/log": text}}})

    def add_condition(self, job: str, ctype: str, reason: str, message: str, status: str = "True") -> None:
        """common/util UpdateJobConditions: one entry per type; Running/Restarting turn False on a change."""
        obj: dict[str, Any] = self.custom.get_namespaced_custom_object(GROUP, VERSION, self.ns, PLURAL, job)
        conditions = list((obj.get("status") or {}).get("conditions") or [])
        for c in conditions:
            if c["type"] in ("Running", "Restarting", "Suspended") and ctype != c["type"]:
                c["status"] = "False"
        conditions = [c for c in conditions if c["type"] != ctype]
        conditions.append({"type": ctype, "status": status, "reason": reason, "message": message,
                           "lastTransitionTime": _now(), "lastUpdateTime": _now()})  # fmt: skip
        self.custom.patch_namespaced_custom_object_status(
            GROUP, VERSION, self.ns, PLURAL, job, {"status": {"conditions": conditions}}
        )

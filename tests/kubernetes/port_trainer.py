"""Kubeflow Trainer v2.3.0, ported: TrainJob + (Cluster)TrainingRuntime -> JobSet.

Each step cites the upstream function (github.com/kubeflow/trainer, tag v2.3.0) it ports. Plain dicts
(the objects' JSON) in and out; the JobSet goes to `port_jobset` for the pods.
"""

from __future__ import annotations

import copy
from typing import Any

# pkg/constants/constants.go
LABEL_ANCESTOR = "trainer.kubeflow.org/trainjob-ancestor-step"
ANCESTOR_TRAINER = "trainer"
NODE = "node"  # constants.Node: the trainer's replicated job and container name
CONTAINER_TRAINER_PORT = 29500  # constants.ContainerTrainerPort
JOB_COMPLETION_INDEX_FIELD_PATH = "metadata.annotations['batch.kubernetes.io/job-completion-index']"
TORCHRUN_RESERVED_ENVS = ("PET_NNODES", "PET_NPROC_PER_NODE", "PET_NODE_RANK", "PET_MASTER_ADDR", "PET_MASTER_PORT")

# Strategic-merge keys of the types runtime patches touch (k8s.io/api core/v1 `patchMergeKey` tags, and
# sigs.k8s.io/jobset api/jobset/v1alpha2 ReplicatedJobs `patchMergeKey:"name"`). Lists not named here
# are replaced whole, as strategicpatch does for lists without a merge key (e.g. tolerations).
_MERGE_KEYS = {
    "replicatedJobs": "name",
    "containers": "name",
    "initContainers": "name",
    "volumes": "name",
    "env": "name",
    "volumeMounts": "mountPath",
    "imagePullSecrets": "name",
    "ports": "containerPort",
}


class AdmissionError(Exception):
    """What the Trainer's validating webhook would answer (field.ErrorList)."""


def strategic_merge(original: Any, patch: Any, key: str | None = None) -> Any:
    """k8s.io/apimachinery/pkg/util/strategicpatch StrategicMergePatch, for the list and map shapes above."""
    if isinstance(original, dict) and isinstance(patch, dict):
        out = dict(original)
        for k, v in patch.items():
            if v is None:
                out.pop(k, None)
            elif k in out:
                out[k] = strategic_merge(out[k], v, k)
            else:
                out[k] = copy.deepcopy(v)
        return out
    if isinstance(original, list) and isinstance(patch, list) and key in _MERGE_KEYS:
        merge_key = _MERGE_KEYS[key]
        out_list = [copy.deepcopy(x) for x in original]
        for item in patch:
            for i, existing in enumerate(out_list):
                if existing.get(merge_key) == item.get(merge_key):
                    out_list[i] = strategic_merge(existing, item, None)
                    break
            else:
                out_list.append(copy.deepcopy(item))
        return out_list
    return copy.deepcopy(patch)


def _upsert(items: list[dict[str, Any]], item: dict[str, Any], same: Any) -> None:
    """pkg/apply/apply.go upsert: replace the first match, else append."""
    for i, existing in enumerate(items):
        if same(existing, item):
            items[i] = item
            return
    items.append(item)


def upsert_env(env: list[dict[str, Any]], *new: dict[str, Any]) -> None:
    """pkg/apply/apply.go UpsertEnvVars (byEnvVarName)."""
    for e in new:
        _upsert(env, copy.deepcopy(e), lambda a, b: a.get("name") == b.get("name"))


def validate(trainjob: dict[str, Any], runtime: dict[str, Any]) -> None:
    """The webhook's checks a trainctl TrainJob can meet: torch.go Validate (reserved envs) and
    plugins/jobset/jobset.go Validate (runtime patches name existing jobs and containers, no env for `node`)."""
    errors: list[str] = []
    spec = trainjob["spec"]
    reserved = sorted({e["name"] for e in (spec.get("trainer") or {}).get("env") or []} & set(TORCHRUN_RESERVED_ENVS))
    if reserved:
        errors.append(f"spec.trainer.env: must not have reserved envs, invalid envs configured: {reserved}")
    names: dict[str, set[str]] = {}
    for rjob in runtime["spec"]["template"]["spec"]["replicatedJobs"]:
        pod = rjob["template"]["spec"]["template"]["spec"]
        names[rjob["name"]] = {c["name"] for c in (pod.get("initContainers") or []) + pod["containers"]}
    for patch in spec.get("runtimePatches") or []:
        tmpl = ((patch.get("trainingRuntimeSpec") or {}).get("template") or {}).get("spec") or {}
        for rpatch in tmpl.get("replicatedJobs") or []:
            if rpatch["name"] not in names:
                errors.append("spec.runtimePatches: must not have replicated job that doesn't exist in the runtime")
                continue
            pod = ((((rpatch.get("template") or {}).get("spec") or {}).get("template") or {}).get("spec")) or {}
            for c in (pod.get("initContainers") or []) + (pod.get("containers") or []):
                if c["name"] not in names[rpatch["name"]]:
                    errors.append(f"spec.runtimePatches: container {c['name']} doesn't exist in job {rpatch['name']}")
                elif c.get("env") and c["name"] == NODE:
                    errors.append("spec.runtimePatches: must not have envs for the node container")
    if errors:
        raise AdmissionError("; ".join(errors))


def _node_container(pod_spec: dict[str, Any]) -> dict[str, Any]:
    return next(c for c in pod_spec["containers"] if c["name"] == NODE)


def build_jobset(trainjob: dict[str, Any], runtime: dict[str, Any]) -> dict[str, Any]:
    """The JobSet the Trainer controller applies for `trainjob` (runtime: the (Cluster)TrainingRuntime)."""
    validate(trainjob, runtime)
    spec = trainjob["spec"]
    name = trainjob["metadata"]["name"]
    template = copy.deepcopy(runtime["spec"]["template"])
    ml_policy = runtime["spec"].get("mlPolicy") or {}
    trainer = spec.get("trainer") or {}

    # pkg/runtime/core/trainingruntime.go newRuntimeInfo: labels/annotations of the runtime template and
    # of each patch's template metadata propagate to the JobSet.
    labels = dict((template.get("metadata") or {}).get("labels") or {})
    annotations = dict((template.get("metadata") or {}).get("annotations") or {})
    for patch in spec.get("runtimePatches") or []:
        meta = ((patch.get("trainingRuntimeSpec") or {}).get("template") or {}).get("metadata") or {}
        labels.update(meta.get("labels") or {})
        annotations.update(meta.get("annotations") or {})
    # mergeRuntimePatches: each patch's template.spec, strategic-merged onto the JobSet spec, in order.
    js_spec = template["spec"]
    for patch in spec.get("runtimePatches") or []:
        patch_spec = ((patch.get("trainingRuntimeSpec") or {}).get("template") or {}).get("spec")
        if patch_spec:
            js_spec = strategic_merge(js_spec, patch_spec)

    counts: dict[str, int] = {}
    for rjob in js_spec["replicatedJobs"]:
        job_spec = rjob["template"]["spec"]
        count = job_spec.get("parallelism", 1)
        is_trainer = (rjob["template"].get("metadata") or {}).get("labels", {}).get(LABEL_ANCESTOR) == ANCESTOR_TRAINER
        if is_trainer:
            count = ml_policy.get("numNodes", 1)
            # newRuntimeInfo: trainer.resourcesPerNode merged (MergeResourceRequirements, SMP) onto `node`.
            if trainer.get("resourcesPerNode") is not None:
                node = _node_container(job_spec["template"]["spec"])
                node["resources"] = strategic_merge(node.get("resources") or {}, trainer["resourcesPerNode"])
        counts[rjob["name"]] = count

    # plugins/torch/torch.go EnforceMLPolicy
    if "torch" in ml_policy:
        trainer_rjob = next(
            r
            for r in js_spec["replicatedJobs"]
            if (r["template"].get("metadata") or {}).get("labels", {}).get(LABEL_ANCESTOR) == ANCESTOR_TRAINER
        )
        if trainer.get("numNodes") is not None:
            counts[trainer_rjob["name"]] = trainer["numNodes"]
        node = _node_container(trainer_rjob["template"]["spec"]["template"]["spec"])
        resources = trainer.get("resourcesPerNode") or node.get("resources") or {}
        nproc = str(trainer["numProcPerNode"]) if trainer.get("numProcPerNode") is not None else "auto"
        gpus = _gpus(resources)
        if nproc == "auto" and gpus == 0:
            nproc = str(max(1, _cpus(resources)))  # getNumCPUPerNode
        env = node.setdefault("env", [])
        upsert_env(env, *(trainer.get("env") or []))
        upsert_env(
            env,
            {"name": "PET_NNODES", "value": str(counts[trainer_rjob["name"]])},
            {"name": "PET_NPROC_PER_NODE", "value": nproc},
            {"name": "PET_NODE_RANK", "valueFrom": {"fieldRef": {"fieldPath": JOB_COMPLETION_INDEX_FIELD_PATH}}},
        )
        upsert_env(
            env,
            {"name": "PET_MASTER_ADDR", "value": f"{name}-{NODE}-0-0.{name}"},
            {"name": "PET_MASTER_PORT", "value": str(CONTAINER_TRAINER_PORT)},
        )
        ports = node.setdefault("ports", [])
        _upsert(ports, {"containerPort": CONTAINER_TRAINER_PORT}, lambda a, b: a.get("containerPort") == 29500)

    # plugins/jobset/jobset.go SyncParallelCount, and builder.go Trainer(): image/command/args from the
    # TrainJob, one replica per replicated job (a Job of `count` indexed pods).
    for rjob in js_spec["replicatedJobs"]:
        rjob["replicas"] = 1
        rjob["template"]["spec"]["parallelism"] = counts[rjob["name"]]
        rjob["template"]["spec"]["completions"] = counts[rjob["name"]]
        rjob["template"]["spec"].setdefault("completionMode", "Indexed")  # JobSet webhook default
        labels_of = (rjob["template"].get("metadata") or {}).get("labels") or {}
        if labels_of.get(LABEL_ANCESTOR) == ANCESTOR_TRAINER:
            node = _node_container(rjob["template"]["spec"]["template"]["spec"])
            for key in ("image", "command", "args"):
                if trainer.get(key) is not None:
                    node[key] = copy.deepcopy(trainer[key])
    # JobSet webhook defaults: DNS hostnames on, subdomain = the JobSet name (jobset_webhook.go Default).
    js_spec.setdefault("network", {}).setdefault("enableDNSHostnames", True)
    js_spec["suspend"] = bool(spec.get("suspend", False))
    return {
        "apiVersion": "jobset.x-k8s.io/v1alpha2",
        "kind": "JobSet",
        "metadata": {"name": name, "namespace": trainjob["metadata"].get("namespace"), "labels": labels,
                     "annotations": annotations},
        "spec": js_spec,
    }  # fmt: skip


def _quantity(text: Any) -> float:
    """resource.Quantity for the forms trainctl writes (plain numbers and `m`)."""
    s = str(text)
    return float(s[:-1]) / 1000 if s.endswith("m") else float(s)


def _cpus(resources: dict[str, Any]) -> int:
    """torch.go getNumCPUPerNode: the CPU request, else the limit, as a whole number (Quantity.Value rounds up)."""
    import math

    req = (resources.get("requests") or {}).get("cpu")
    lim = (resources.get("limits") or {}).get("cpu")
    value = req if req not in (None, "0") else lim
    return math.ceil(_quantity(value)) if value is not None else 0


def _gpus(resources: dict[str, Any]) -> int:
    """pkg/runtime/runtime.go GetNumGPUPerNode/numGPU: the first resource whose name contains "gpu",
    from requests, else from limits."""

    def num(part: dict[str, Any]) -> int:
        for res_name, value in part.items():
            if "gpu" in res_name.lower():
                return int(value)
        return 0

    return num(resources.get("requests") or {}) or num(resources.get("limits") or {})


GROUP, VERSION = "trainer.kubeflow.org", "v1alpha1"


def _condition(ctype: str, reason: str, message: str) -> dict[str, Any]:
    import datetime

    now = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    return {"type": ctype, "status": "True", "reason": reason, "message": message, "lastTransitionTime": now}


class TrainerController:
    """The Trainer's TrainJob reconciler for one TrainJob on the test API server: read it and its
    ClusterTrainingRuntime, build the JobSet (`build_jobset`), run it (`port_jobset`), and write the
    TrainJob status as plugins/jobset/jobset.go Status does (Complete/Failed from the JobSet's
    Completed/Failed condition, jobsStatus per replicated job)."""

    def __init__(self, api_client: Any, namespace: str, runner: Any) -> None:
        from kubernetes import client

        self.custom = client.CustomObjectsApi(api_client)
        self.core = client.CoreV1Api(api_client)
        self.ns = namespace
        self.runner = runner

    def run(self, name: str, timeout: float = 600) -> dict[str, Any]:
        from port_jobset import JobSetController

        trainjob = self.custom.get_namespaced_custom_object(GROUP, VERSION, self.ns, "trainjobs", name)
        ref = trainjob["spec"]["runtimeRef"]
        assert ref.get("kind", "ClusterTrainingRuntime") == "ClusterTrainingRuntime", ref
        runtime = self.custom.get_cluster_custom_object(GROUP, VERSION, "clustertrainingruntimes", ref["name"])
        jobset = build_jobset(trainjob, runtime)
        self.jobset = jobset
        self.controller = JobSetController(self.core, self.ns, self.runner)

        def on_status(verdict: tuple[str, str, str] | None, jobs: list[Any]) -> None:
            status: dict[str, Any] = {
                "jobsStatus": [
                    {"name": j.rjob, "active": 0 if verdict else len(j.pods), "ready": 0 if verdict else len(j.pods),
                     "succeeded": len(j.succeeded), "failed": j.failed_pods, "suspended": 0}
                    for j in jobs
                ]
            }  # fmt: skip
            if verdict is not None:
                ctype = {"Completed": "Complete", "Failed": "Failed"}[verdict[0]]
                status["conditions"] = [_condition(ctype, verdict[1], verdict[2])]
            self.custom.patch_namespaced_custom_object_status(
                GROUP, VERSION, self.ns, "trainjobs", name, {"status": status}
            )

        self.controller.run(jobset, on_status, timeout)
        final: dict[str, Any] = self.custom.get_namespaced_custom_object(GROUP, VERSION, self.ns, "trainjobs", name)
        return final

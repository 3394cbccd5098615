"""Job -> Kubeflow Trainer v2 (v2.3.0) TrainJob on trainctl's ClusterTrainingRuntime (k8s/). Pure.

The runtime (`k8s/trainingruntimes.yaml`) holds what every trainctl pod has: the `node` container running
the launcher, restricted security contexts, the in-memory /dev/shm and scratch volumes, the service
account, and the JobSet failure policy (exit 2 fails at once; other failures restart the JobSet up to
maxRestarts). The TrainJob says the rest through its own fields (`spec.trainer`: image, command, env,
numNodes, numProcPerNode, resourcesPerNode; `activeDeadlineSeconds`) and one runtime patch (Trainer
v2.3.0 `runtimePatches`, manager `trainctl.io/trainctl`): PVC volumes and mounts, the /dev/shm size,
pod labels/annotations, node selector, tolerations, affinity, image pull secrets, service account.
What a TrainJob cannot say is refused, naming the field and `kubernetes.api: pytorchjob`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ...errors import JobError
from ...spec.job_spec import JobSpec
from .labels import driven_metadata
from .pod import KUEUE_QUEUE_LABEL, RUN_SUFFIX, node_addrs_env, pod_labels, pod_parts, pod_scheduling
from .section import KubernetesSection

API_VERSION = "trainer.kubeflow.org/v1alpha1"
KIND = "TrainJob"
GROUP, VERSION, PLURAL = "trainer.kubeflow.org", "v1alpha1", "trainjobs"
NODE = "node"  # the runtime's replicated job and container (Trainer constants.Node)
RUNTIME_PREFIX = "trainctl-torch-r"  # k8s/trainingruntimes.yaml: r0 restarts nothing (trainctl retries: attempts.py)
PATCH_MANAGER = "trainctl.io/trainctl"
RUNTIME_SHM = "8Gi"  # the runtime's /dev/shm sizeLimit
JOBSET_NAME_LABEL = "jobset.sigs.k8s.io/jobset-name"  # on every pod the TrainJob's JobSet makes
COMPLETION_INDEX = "batch.kubernetes.io/job-completion-index"  # the pod's node rank (PET_NODE_RANK)
_ALTERNATIVE = "set kubernetes.api: pytorchjob (Training Operator v1.9) if the cluster runs it"


def runtime_name(job: JobSpec, sec: KubernetesSection) -> str:
    """trainctl-torch-r0: the JobSet restarts nothing in place; a job's `retries` are trainctl's, each attempt
    a new TrainJob kept off the nodes earlier attempts blamed (attempts.py)."""
    return sec.runtime or f"{RUNTIME_PREFIX}0"


def cannot_express(job: JobSpec, sec: KubernetesSection) -> list[str]:
    """The job's settings a TrainJob has no field for (Trainer v2.3.0), each naming the alternative."""
    out: list[str] = []
    defaults = KubernetesSection.model_fields
    if job.resources.elastic is not None:
        out.append(f"resources.elastic: Kubeflow Trainer v2 has no elastic training; {_ALTERNATIVE}")
    if sec.use_master:
        out.append(f"kubernetes.use_master: a TrainJob has no Master replica (node 0 leads); {_ALTERNATIVE}")
    if sec.volcano_queue:
        out.append(
            "kubernetes.volcano_queue: a TrainJob's Volcano settings live in its runtime's podGroupPolicy, not "
            f"in the TrainJob; use kubernetes.kueue_queue, or {_ALTERNATIVE}"
        )
    if sec.priority_class:
        out.append(
            "kubernetes.priority_class: a TrainJob cannot set priorityClassName (runtimePatches allow no such "
            "field); with Kueue set kubernetes.labels {kueue.x-k8s.io/priority-class: <WorkloadPriorityClass>}, "
            f"or {_ALTERNATIVE}"
        )
    if sec.scheduler_name:
        out.append(f"kubernetes.scheduler_name: a TrainJob cannot set schedulerName; {_ALTERNATIVE}")
    for name in ("clean_pod_policy", "ttl_seconds_after_finished"):  # PyTorchJob's; a default is no request
        if getattr(sec, name) != defaults[name].default:
            out.append(f"kubernetes.{name}: a PyTorchJob run policy; a TrainJob has no such field; {_ALTERNATIVE}")
    if sec.service_account is None:
        out.append(
            "kubernetes.service_account: got null; the ClusterTrainingRuntime names trainctl-trainer and a "
            "TrainJob can only name another account: give one"
        )
    host = f"{job.name}{RUN_SUFFIX}-{NODE}-0-{job.resources.nodes - 1}"
    if len(host) > 63 or not job.name[:1].isalpha():
        out.append(
            f"name: got {job.name!r}; a TrainJob's name is a DNS-1035 label (starts with a letter) and its pods' "
            f"host names ({host!r}, {len(host)} characters, with the {RUN_SUFFIX} `trainctl submit` adds) must "
            "fit 63: shorten the name"
        )
    return out


def build_trainjob(
    job: JobSpec, sec: KubernetesSection, name: str | None = None, avoid_nodes: Sequence[str] = ()
) -> dict[str, Any]:
    """The TrainJob named `name` (default: the job's name) as a dict (JobError naming each field a TrainJob
    cannot express); its pods never land on `avoid_nodes` (a retry's, `pod.avoiding_nodes`)."""
    problems = cannot_express(job, sec)
    parts = pod_parts(job, sec, problems, name)
    if problems:
        raise JobError(problems, f"kubernetes target ({job.name})")
    res = job.resources
    # JobSet names node i's pod <jobset>-<replicated job>-<job index>-<i> in the subdomain <jobset>
    obj = name or job.name
    parts.env += node_addrs_env(job, [f"{obj}-{NODE}-0-{i}.{obj}" for i in range(res.nodes)])
    labels = pod_labels(job, sec)
    pod_meta: dict[str, Any] = {"labels": dict(labels)}
    if sec.annotations:
        pod_meta["annotations"] = dict(sec.annotations)
    if sec.kueue_queue:
        labels[KUEUE_QUEUE_LABEL] = sec.kueue_queue

    volumes = list(parts.claim_volumes)
    if sec.shm_size != RUNTIME_SHM:
        volumes.insert(0, parts.base_volumes[0])  # dshm, merged by name onto the runtime's
    node: dict[str, Any] = {"name": NODE}
    if parts.claim_mounts:
        node["volumeMounts"] = parts.claim_mounts
    pod_spec: dict[str, Any] = {"containers": [node]} if len(node) > 1 else {}
    if volumes:
        pod_spec["volumes"] = volumes
    pod_spec.update(pod_scheduling(sec, avoid_nodes))  # priority_class, scheduler_name: refused above
    patch = {
        "manager": PATCH_MANAGER,
        "trainingRuntimeSpec": {"template": {"spec": {"replicatedJobs": [
            {"name": NODE, "template": {"spec": {"template": {"metadata": pod_meta, "spec": pod_spec}}}}
        ]}}},
    }  # fmt: skip
    trainer: dict[str, Any] = {
        "image": job.image,
        "command": parts.command,
        "env": parts.env,
        "numNodes": res.nodes,
        "numProcPerNode": res.nprocs,
        "resourcesPerNode": parts.resources,
    }
    spec: dict[str, Any] = {"runtimeRef": {"name": runtime_name(job, sec)}, "trainer": trainer}
    if job.max_runtime_seconds is not None:
        spec["activeDeadlineSeconds"] = job.max_runtime_seconds
    spec["runtimePatches"] = [patch]
    driven_labels, driven_notes = driven_metadata(job)
    metadata: dict[str, Any] = {"name": name or job.name, "namespace": sec.namespace, "labels": labels | driven_labels}
    if sec.annotations or driven_notes:
        metadata["annotations"] = dict(sec.annotations) | driven_notes
    return {"apiVersion": API_VERSION, "kind": KIND, "metadata": metadata, "spec": spec}

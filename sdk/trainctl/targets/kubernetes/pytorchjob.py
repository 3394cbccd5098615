"""Job -> Kubeflow Training Operator v1.9 PyTorchJob (for elastic jobs and clusters still on v1.9). Pure.

Shapes, so that the operator (release-1.9 `pkg/controller.v1/pytorch`) gives every pod a rank and a
rendezvous:
- fixed multi-node: Master (1) + Worker (nodes - 1); `envvar.go setPodEnv` sets MASTER_ADDR/PORT,
  WORLD_SIZE, RANK and PET_NODE_RANK only when a Master exists (Workers alone get nothing to meet at);
- elastic: Workers only with `elasticPolicy` (`elastic.go`: PET_RDZV_ENDPOINT=<job>-worker-0:<port>,
  PET_NNODES=min:max, c10d), its min/max bounding the Worker replicas;
- one node: one Worker (PET_NNODES=1, the launcher's standalone rendezvous).
`retries` are trainctl's (attempts.py): each attempt a new PyTorchJob kept off the nodes earlier attempts
blamed, so every replica is restartPolicy Never with backoffLimit 0 (an OnFailure restart, counted by
`core/job.go PastBackoffLimit`, reruns the container in the same pod, on the same node).
The operator's admission webhook is not something a cluster is guaranteed to run (and the API server
alone does not enforce it), so its rules are checked here, before anything is sent.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from ...errors import JobError
from ...spec.job_spec import JobSpec
from .labels import driven_metadata
from .pod import KUEUE_QUEUE_LABEL, RUN_SUFFIX, node_addrs_env, pod_labels, pod_parts, pod_scheduling, tree_copy
from .section import KubernetesSection

API_VERSION = "kubeflow.org/v1"
KIND = "PyTorchJob"
GROUP, VERSION, PLURAL = "kubeflow.org", "v1", "pytorchjobs"
CONTAINER = "pytorch"
# The training operator's pod labels (used to find a job's pods).
OP_JOB_NAME = "training.kubeflow.org/job-name"
OP_REPLICA_TYPE = "training.kubeflow.org/replica-type"
OP_REPLICA_INDEX = "training.kubeflow.org/replica-index"
REPLICA_TYPES = ("Master", "Worker")
_DNS1035 = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")


def _pod_template(
    job: JobSpec, sec: KubernetesSection, problems: list[str], name: str | None, avoid_nodes: Sequence[str]
) -> dict[str, Any]:
    parts = pod_parts(job, sec, problems, name)
    container: dict[str, Any] = {
        "name": CONTAINER,
        "image": job.image,
        "imagePullPolicy": "IfNotPresent",
        "command": parts.command,
        "env": parts.env,
        "resources": parts.resources,
        "securityContext": parts.container_security,
        "volumeMounts": parts.base_mounts + parts.claim_mounts,
    }
    spec: dict[str, Any] = {
        "containers": [container],
        "securityContext": parts.pod_security,
        "volumes": parts.base_volumes + parts.claim_volumes,
        "enableServiceLinks": False,
        **pod_scheduling(sec, avoid_nodes),
    }
    metadata: dict[str, Any] = {"labels": pod_labels(job, sec)}
    if sec.annotations:
        metadata["annotations"] = dict(sec.annotations)
    return {"metadata": metadata, "spec": spec}


def uses_master(job: JobSpec, sec: KubernetesSection) -> bool:
    """A Master unless elastic (Workers scale) or a single node; `use_master` decides when set."""
    if sec.use_master is not None:
        return sec.use_master
    return job.resources.elastic is None and job.resources.nodes > 1


def build_pytorchjob(
    job: JobSpec, sec: KubernetesSection, name: str | None = None, avoid_nodes: Sequence[str] = ()
) -> dict[str, Any]:
    """The PyTorchJob named `name` (default: the job's name) as a dict, checked against the operator's webhook
    rules (JobError naming the field) with room for the suffix `trainctl submit` adds to the name; its pods
    never land on `avoid_nodes` (a retry's, `pod.avoiding_nodes`)."""
    res = job.resources
    problems: list[str] = []
    if sec.runtime is not None:
        problems.append(
            f"kubernetes.runtime: got {sec.runtime!r}; a PyTorchJob has no runtime (that is a TrainJob's "
            "ClusterTrainingRuntime): remove it, or set kubernetes.api: trainjob"
        )
    master = uses_master(job, sec)
    if master and res.elastic is not None:
        problems.append(
            "kubernetes.use_master: got true with resources.elastic; elastic training scales Worker replicas "
            "(elasticPolicy bounds them, the rendezvous is on worker 0): set use_master: false"
        )
    template = _pod_template(job, sec, problems, name, avoid_nodes)
    restart = "Never"
    replicas: dict[str, Any] = {}
    workers = res.nodes - 1 if master else res.nodes
    # the operator's Service per pod, envvar.go replicaName: <job>-<type>-<index>; node ranks Master first
    obj = name or job.name
    addrs = [f"{obj}-master-0"] * master + [f"{obj}-worker-{i}" for i in range(workers)]
    template["spec"]["containers"][0]["env"] += node_addrs_env(job, addrs)
    if master:
        replicas["Master"] = {"replicas": 1, "restartPolicy": restart, "template": template}
    if workers > 0:
        replicas["Worker"] = {"replicas": workers, "restartPolicy": restart, "template": tree_copy(template)}

    run_policy: dict[str, Any] = {"cleanPodPolicy": sec.clean_pod_policy, "backoffLimit": 0}
    if job.max_runtime_seconds is not None:
        run_policy["activeDeadlineSeconds"] = job.max_runtime_seconds
    if sec.ttl_seconds_after_finished is not None:
        run_policy["ttlSecondsAfterFinished"] = sec.ttl_seconds_after_finished
    if sec.volcano_queue or sec.priority_class or sec.scheduler_name:
        gang: dict[str, Any] = {"minAvailable": res.elastic.min_nodes if res.elastic else res.nodes}
        if sec.volcano_queue:
            gang["queue"] = sec.volcano_queue
        if sec.priority_class:
            gang["priorityClass"] = sec.priority_class
        run_policy["schedulingPolicy"] = gang

    spec: dict[str, Any] = {"nprocPerNode": str(res.nprocs)}
    if res.elastic is not None:
        spec["elasticPolicy"] = {
            "rdzvBackend": "c10d",
            "minReplicas": res.elastic.min_nodes,
            "maxReplicas": res.elastic.max_nodes,
            "maxRestarts": res.max_restarts,
        }
    spec["pytorchReplicaSpecs"] = replicas
    spec["runPolicy"] = run_policy

    labels = pod_labels(job, sec)
    if sec.kueue_queue:
        labels[KUEUE_QUEUE_LABEL] = sec.kueue_queue
    driven_labels, driven_notes = driven_metadata(job)
    metadata: dict[str, Any] = {"name": name or job.name, "namespace": sec.namespace, "labels": labels | driven_labels}
    if sec.annotations or driven_notes:
        metadata["annotations"] = dict(sec.annotations) | driven_notes
    manifest = {"apiVersion": API_VERSION, "kind": KIND, "metadata": metadata, "spec": spec}
    longest = {**manifest, "metadata": {**metadata, "name": f"{job.name}{RUN_SUFFIX}"}}
    problems += webhook_problems(longest if name is None else manifest)
    if problems:
        raise JobError(problems, f"kubernetes target ({job.name})")
    return manifest


# The job field each manifest rule is about, so an error names what the user can change.
_FIELD_FOR = {
    "metadata.name": "name",
    "spec.pytorchReplicaSpecs.Master.replicas": "kubernetes.use_master",
    "spec.elasticPolicy": "resources.elastic",
}


def webhook_problems(manifest: dict[str, Any]) -> list[str]:
    """The Kubeflow training operator's PyTorchJob webhook rules (v1.9), as messages naming the field."""
    problems: list[str] = []
    name = str((manifest.get("metadata") or {}).get("name", ""))
    spec = manifest.get("spec") or {}
    specs: dict[str, Any] = spec.get("pytorchReplicaSpecs") or {}
    if len(name) > 63 or not _DNS1035.match(name):
        problems.append(
            f"metadata.name ({_FIELD_FOR['metadata.name']}): got {name!r}; must be a DNS-1035 label: "
            "a lowercase letter, then lowercase letters, digits or '-', not ending in '-', at most 63 characters"
        )
    else:
        for rtype, rspec in specs.items():
            count = int((rspec or {}).get("replicas", 1))
            pod = f"{name}-{str(rtype).lower()}-{max(count - 1, 0)}"
            if len(pod) > 63:
                problems.append(
                    f"name: {name!r} is too long for {count} {rtype} pod(s): the operator names them like {pod!r} "
                    f"({len(pod)} characters; Service names allow 63); shorten the name"
                )
                break
    if not specs:
        problems.append("spec.pytorchReplicaSpecs: must have at least one replica type (Master or Worker)")
    for rtype, rspec in specs.items():
        where = f"spec.pytorchReplicaSpecs.{rtype}"
        if rtype not in REPLICA_TYPES:
            problems.append(f"{where}: replica type {rtype!r} is not allowed; only Master and Worker")
            continue
        rspec = rspec or {}
        # pytorchjob_webhook.go validatePyTorchReplicaSpecs: Master replicas must be set and be 1;
        # Worker replicas, when set, at least 1.
        replicas = rspec.get("replicas")
        if rtype == "Master" and replicas != 1:
            problems.append(f"{where}.replicas (kubernetes.use_master): got {replicas}; must be 1")
        elif rtype == "Worker" and replicas is not None and (not isinstance(replicas, int) or replicas < 1):
            problems.append(f"{where}.replicas (resources.nodes): got {replicas!r}; must be at least 1")
        containers = ((rspec.get("template") or {}).get("spec") or {}).get("containers") or []
        if not any(c.get("name") == CONTAINER for c in containers):
            problems.append(f"{where}.template.spec.containers: needs a container named {CONTAINER!r}")
        for i, c in enumerate(containers):
            if not c.get("image"):
                problems.append(f"{where}.template.spec.containers[{i}].image: must not be empty")
    elastic = spec.get("elasticPolicy")
    if elastic is not None:
        if "Worker" not in specs:
            problems.append(
                "spec.elasticPolicy (resources.elastic): elastic training scales Workers, but there is no Worker "
                "replica; add nodes or set kubernetes.use_master: false"
            )
        if elastic.get("nProcPerNode") is not None and spec.get("nprocPerNode") is not None:
            problems.append("spec.elasticPolicy.nProcPerNode: must not be set together with spec.nprocPerNode")
        lo, hi = elastic.get("minReplicas"), elastic.get("maxReplicas")
        if lo is not None and hi is not None and lo > hi:
            problems.append(f"spec.elasticPolicy: minReplicas={lo} is more than maxReplicas={hi}")
        # elastic.go: minReplicas/maxReplicas become PET_NNODES=min:max for the Worker pods, so they
        # bound the Worker replicas (a Master would be outside the rendezvous).
        workers = (specs.get("Worker") or {}).get("replicas", 1)
        if "Master" in specs:
            problems.append(
                "spec.pytorchReplicaSpecs.Master (kubernetes.use_master): an elastic job's rendezvous is on "
                "worker 0 and counts Workers only; set use_master: false"
            )
        if lo is not None and hi is not None and not lo <= workers <= hi:
            problems.append(
                f"spec.pytorchReplicaSpecs.Worker.replicas (resources.nodes): got {workers}; elastic bounds are "
                f"minReplicas={lo}..maxReplicas={hi}"
            )
    return problems

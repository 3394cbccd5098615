"""Job -> Kubeflow PyTorchJob manifest. Pure and deterministic: no I/O, no kubernetes import.

The training operator's admission webhook is not something a cluster is guaranteed to run (and the
API server alone does not enforce it), so its rules are checked here, before anything is sent.
"""

from __future__ import annotations

import copy
import re
from typing import Any

from ...errors import JobError
from ...spec import JobSpec
from ...units import parse_memory_mib
from ..base import Rendered
from ..program import data_env, launcher_argv, program_argv
from .section import DNS1123_SUBDOMAIN, KubernetesSection
from .yaml_bytes import manifest_yaml

API_VERSION = "kubeflow.org/v1"
KIND = "PyTorchJob"
GROUP, VERSION, PLURAL = "kubeflow.org", "v1", "pytorchjobs"
CONTAINER = "pytorch"
TRAINER_UID = 10001  # the image's fixed non-root user (Dockerfile TRAINER_UID)
KUEUE_QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
JOB_LABEL = "trainctl.io/job"
MANAGED_BY = {"app.kubernetes.io/managed-by": "trainctl"}
# The training operator's pod labels (used to find a job's pods).
OP_JOB_NAME = "training.kubeflow.org/job-name"
OP_REPLICA_TYPE = "training.kubeflow.org/replica-type"
OP_REPLICA_INDEX = "training.kubeflow.org/replica-index"
REPLICA_TYPES = ("Master", "Worker")
SCRATCH = "scratch"
# Writable places under a read-only root filesystem, all on one emptyDir.
SCRATCH_MOUNTS = (("/tmp", "tmp"), ("/home/trainer", "home"), ("/workspace", "workspace"))
_DNS1035 = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")
_SECRET_KEY = re.compile(r"^[-._a-zA-Z0-9]+$")


def quantity(mib: int) -> str:
    """A Kubernetes quantity for a MiB count, in Gi when whole."""
    return f"{mib // 1024}Gi" if mib % 1024 == 0 else f"{mib}Mi"


class _Paths:
    """Where the job's inputs, checkpoints and outputs are inside the pod, and the volumes that put them there."""

    def __init__(self, job: JobSpec, section: KubernetesSection) -> None:
        self.job = job
        self.section = section
        self.claims: dict[str, str] = {}  # other PVCs (read-only) -> mount path
        self.problems: list[str] = []

    def resolve(self, uri: str, field: str) -> str:
        """A job location as a path in the container: pvc://claim/path, an absolute path, or relative to the PVC."""
        sec = self.section
        if uri.startswith("s3://"):
            self.problems.append(
                f"{field}: got {uri!r}; the trainer reads files, and pods have no S3 mount: copy the data to a "
                "PersistentVolumeClaim and use pvc://<claim>/<path>"
            )
            return uri
        if uri.startswith("pvc://"):
            claim, _, sub = uri[len("pvc://") :].partition("/")
            if not claim or len(claim) > 253 or not DNS1123_SUBDOMAIN.match(claim):
                self.problems.append(f"{field}: got {uri!r}; expected pvc://<claim name>/<path inside it>")
                return uri
            base = sec.pvc_mount_path if claim == sec.pvc else self.claims.setdefault(claim, f"/mnt/pvc/{claim}")
            return f"{base}/{sub.strip('/')}" if sub.strip("/") else base
        path = uri[len("file://") :] if uri.startswith("file://") else uri
        if path.startswith("/"):
            return path
        if sec.pvc is None:
            self.problems.append(
                f"{field}: got relative path {uri!r}, which on Kubernetes is read on the PVC, but kubernetes.pvc is "
                "unset; give pvc://<claim>/<path> or an absolute path inside the image"
            )
            return path
        return f"{sec.pvc_mount_path}/{path.removeprefix('./')}"

    def default_dir(self, leaf: str) -> str:
        if self.section.pvc is None:
            return f"/workspace/{leaf}"
        return f"{self.section.pvc_mount_path}/{self.job.name}/{leaf}"


def _inert(text: str) -> str:
    """Kubelet expands `$(VAR)` in a container's command and env values (and turns `$$` into `$`):
    doubling every `$` makes the text reach the process literally, whatever it holds."""
    return text.replace("$", "$$")


def _env(
    job: JobSpec, paths: dict[str, str], checkpoint_dir: str, output_dir: str
) -> tuple[list[dict[str, Any]], list[str]]:
    env: list[dict[str, Any]] = [
        {"name": "TRAINER_CHECKPOINT_DIR", "value": checkpoint_dir},
        {"name": "TRAINER_OUTPUT_DIR", "value": output_dir},
    ]
    env += [{"name": k, "value": v} for k, v in data_env(paths).items()]
    env += [{"name": k, "value": job.env[k]} for k in sorted(job.env)]
    env = [{**e, "value": _inert(e["value"])} for e in env]
    problems: list[str] = []
    for i, secret in enumerate(job.secrets):
        key = secret.key or secret.env
        if len(secret.name) > 253 or not DNS1123_SUBDOMAIN.match(secret.name):
            problems.append(
                f"secrets[{i}].name: got {secret.name!r}; a Kubernetes Secret name is lowercase letters, digits, '-' and '.'"
            )
        if not _SECRET_KEY.match(key):
            problems.append(f"secrets[{i}].key: got {key!r}; a Secret key is letters, digits, '-', '_' and '.'")
        env.append({"name": secret.env, "valueFrom": {"secretKeyRef": {"name": secret.name, "key": key}}})
    return env, problems


def _resources(job: JobSpec) -> dict[str, Any]:
    res = job.resources
    amounts: dict[str, str] = {"cpu": str(res.cpus_per_proc * res.nprocs)}
    if res.memory_mib is not None:
        amounts["memory"] = quantity(res.memory_mib)
    if res.gpus_per_node:
        amounts["nvidia.com/gpu"] = str(res.gpus_per_node)
    # requests == limits: Guaranteed QoS, so a training pod is the last one evicted.
    return {"requests": dict(amounts), "limits": dict(amounts)}


def _security() -> tuple[dict[str, Any], dict[str, Any]]:
    pod = {
        "runAsNonRoot": True,
        "runAsUser": TRAINER_UID,
        "runAsGroup": TRAINER_UID,
        "fsGroup": TRAINER_UID,
        "seccompProfile": {"type": "RuntimeDefault"},
    }
    container = {
        "allowPrivilegeEscalation": False,
        "capabilities": {"drop": ["ALL"]},
        "privileged": False,
        "readOnlyRootFilesystem": True,
        "runAsNonRoot": True,
        "seccompProfile": {"type": "RuntimeDefault"},
    }
    return pod, container


def _labels(job: JobSpec, sec: KubernetesSection) -> dict[str, str]:
    return {**sec.labels, **MANAGED_BY, JOB_LABEL: job.name}


def _pod_template(job: JobSpec, sec: KubernetesSection, problems: list[str]) -> dict[str, Any]:
    paths = _Paths(job, sec)
    data_paths = {name: paths.resolve(uri, f"data.{name}") for name, uri in sorted(job.data.items())}
    checkpoint_dir = (
        paths.resolve(job.checkpoint.dir, "checkpoint.dir") if job.checkpoint.dir else paths.default_dir("checkpoints")
    )
    output_dir = paths.resolve(job.output_dir, "output_dir") if job.output_dir else paths.default_dir("output")
    if job.trainer is not None:
        for field in ("train_data", "val_data"):
            value = getattr(job.trainer, field)
            if value is not None and not value.startswith(("/", "${")):
                problems.append(
                    f"trainer.{field}: got {value!r}; in a pod the trainer reads it as is, so give an absolute path, "
                    f"or name the input under data: (relative paths there are read on the PVC, pvc:// works too)"
                )
    argv = launcher_argv(
        job, program_argv(job, data_paths=data_paths, checkpoint_dir=checkpoint_dir, output_dir=output_dir)
    )
    env, secret_problems = _env(job, data_paths, checkpoint_dir, output_dir)
    problems += paths.problems + secret_problems

    pod_security, container_security = _security()
    mounts: list[dict[str, Any]] = [{"name": "dshm", "mountPath": "/dev/shm"}]
    mounts += [{"name": SCRATCH, "mountPath": path, "subPath": sub} for path, sub in SCRATCH_MOUNTS]
    volumes: list[dict[str, Any]] = [
        {"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": quantity(parse_memory_mib(sec.shm_size))}},
        {"name": SCRATCH, "emptyDir": {}},
    ]
    if sec.pvc is not None:
        mounts.append({"name": "pvc", "mountPath": sec.pvc_mount_path})
        volumes.append({"name": "pvc", "persistentVolumeClaim": {"claimName": sec.pvc}})
    for i, (claim, mount) in enumerate(sorted(paths.claims.items())):
        mounts.append({"name": f"pvc-{i}", "mountPath": mount, "readOnly": True})
        volumes.append({"name": f"pvc-{i}", "persistentVolumeClaim": {"claimName": claim, "readOnly": True}})

    container: dict[str, Any] = {
        "name": CONTAINER,
        "image": job.image,
        "imagePullPolicy": "IfNotPresent",
        "command": [_inert(a) for a in argv],
        "env": env,
        "resources": _resources(job),
        "securityContext": container_security,
        "volumeMounts": mounts,
    }
    spec: dict[str, Any] = {
        "containers": [container],
        "securityContext": pod_security,
        "volumes": volumes,
        "enableServiceLinks": False,
    }
    if sec.service_account:
        spec["serviceAccountName"] = sec.service_account
    if sec.image_pull_secrets:
        spec["imagePullSecrets"] = [{"name": n} for n in sec.image_pull_secrets]
    if sec.node_selector:
        spec["nodeSelector"] = dict(sorted(sec.node_selector.items()))
    if sec.tolerations:
        spec["tolerations"] = [dict(t) for t in sec.tolerations]
    if sec.affinity:
        spec["affinity"] = sec.affinity
    if sec.priority_class:
        spec["priorityClassName"] = sec.priority_class
    if sec.scheduler_name:
        spec["schedulerName"] = sec.scheduler_name
    metadata: dict[str, Any] = {"labels": _labels(job, sec)}
    if sec.annotations:
        metadata["annotations"] = dict(sec.annotations)
    return {"metadata": metadata, "spec": spec}


def _tree_copy(value: Any) -> Any:
    """A deep copy of JSON-like data (dicts, lists, scalars), several times faster than `copy.deepcopy`."""
    kind = type(value)
    if kind is dict:
        return {k: _tree_copy(v) for k, v in value.items()}
    if kind is list:
        return [_tree_copy(v) for v in value]
    if kind in (str, int, bool, float) or value is None:
        return value
    return copy.deepcopy(value)


def build_manifest(job: JobSpec) -> dict[str, Any]:
    """The PyTorchJob as a dict, checked against the operator's webhook rules (JobError naming the field)."""
    sec = job.section("kubernetes")
    assert isinstance(sec, KubernetesSection)
    res = job.resources
    problems: list[str] = []
    template = _pod_template(job, sec, problems)
    restart = "ExitCode" if job.retries else "Never"  # ExitCode: retry 128+ (preempted), not 1-127 (bad input)
    replicas: dict[str, Any] = {}
    workers = res.nodes - 1 if sec.use_master else res.nodes
    if sec.use_master:
        replicas["Master"] = {"replicas": 1, "restartPolicy": restart, "template": template}
    if workers > 0:
        replicas["Worker"] = {"replicas": workers, "restartPolicy": restart, "template": _tree_copy(template)}

    run_policy: dict[str, Any] = {"cleanPodPolicy": sec.clean_pod_policy, "backoffLimit": job.retries}
    if job.max_runtime_seconds is not None:
        run_policy["activeDeadlineSeconds"] = job.max_runtime_seconds
    if sec.ttl_seconds_after_finished is not None:
        run_policy["ttlSecondsAfterFinished"] = sec.ttl_seconds_after_finished
    if sec.queue or sec.priority_class or sec.scheduler_name:
        gang: dict[str, Any] = {"minAvailable": res.elastic.min_nodes if res.elastic else res.nodes}
        if sec.queue:
            gang["queue"] = sec.queue
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

    labels = _labels(job, sec)
    if sec.queue:
        labels[KUEUE_QUEUE_LABEL] = sec.queue
    metadata: dict[str, Any] = {"name": job.name, "namespace": sec.namespace, "labels": labels}
    if sec.annotations:
        metadata["annotations"] = dict(sec.annotations)
    manifest = {"apiVersion": API_VERSION, "kind": KIND, "metadata": metadata, "spec": spec}
    problems += webhook_problems(manifest)
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
        count = rspec.get("replicas", 1)
        if rtype == "Master" and count != 1:
            problems.append(f"{where}.replicas (kubernetes.use_master): got {count}; a Master has exactly 1 replica")
        if not isinstance(count, int) or count < (1 if rtype == "Master" else 0):
            problems.append(f"{where}.replicas: got {count!r}; expected a non-negative integer")
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
    return problems


def render(job: JobSpec) -> Rendered:
    """The PyTorchJob manifest for a job (what `kubectl apply -f` would take)."""
    manifest = build_manifest(job)
    notes: list[str] = []
    sec = job.section("kubernetes")
    assert isinstance(sec, KubernetesSection)
    if sec.pvc is None and not job.checkpoint.dir:
        notes.append("kubernetes.pvc is unset: checkpoints go to an emptyDir and do not survive a pod's deletion")
    if job.spot:
        notes.append("spot: Kubernetes has no single spot flag; select spot nodes with node_selector/tolerations")
    if sec.pvc is not None:
        notes.append(f"needs PersistentVolumeClaim {sec.pvc!r} in namespace {sec.namespace!r} (kubectl apply -k k8s/)")
    return Rendered(
        target="kubernetes",
        text=manifest_yaml(manifest),
        native=manifest,
        filename=f"{job.name}.pytorchjob.yaml",
        notes=tuple(notes),
    )

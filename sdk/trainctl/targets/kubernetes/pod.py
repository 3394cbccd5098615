"""What every trainctl pod holds, whichever Kubeflow API creates it: the launcher command, the env,
resources, security contexts, and the volumes for /dev/shm, scratch space and the PVCs. Pure."""

from __future__ import annotations

import copy
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from ...function import ENV_SHA
from ...runs.identity import uid_of
from ...runs.provenance import provenance_env
from ...spec.job_spec import JobSpec
from ...spec.units import parse_memory_mib
from ..program import (
    LAUNCHER,
    data_env,
    launcher_argv,
    program_argv,
    s3_checkpoint,
    s3_checkpoint_env,
    s3_checkpoint_problems,
    s3_inputs,
    s3_output,
    s3_output_problems,
    stream_env,
)
from .code import code_bundle
from .code import pod_parts as code_pod_parts
from .section import DNS1123_SUBDOMAIN, KubernetesSection

TRAINER_UID = 10001  # the image's fixed non-root user (Dockerfile TRAINER_UID)
KUEUE_QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
JOB_LABEL = "trainctl.io/job"
MANAGED_BY = {"app.kubernetes.io/managed-by": "trainctl"}
SCRATCH = "scratch"
# Writable places under a read-only root filesystem, all on one emptyDir.
SCRATCH_MOUNTS = (("/tmp", "tmp"), ("/home/trainer", "home"), ("/workspace", "workspace"))
NODE_NAME_ENV = "TRAINCTL_NODE_NAME"  # trainer/heartbeat.py node_name reads it
TERMINATION_LOG_ENV = "TRAINCTL_TERMINATION_LOG"  # trainer/records.py write_termination_message reads it
TERMINATION_LOG = "/dev/termination-log"
"""The container's terminationMessagePath as the API server defaults it (core/v1 TerminationMessagePathDefault,
pkg/apis/core/v1/defaults.go SetDefaults_Container): the kubelet copies the file into the pod's status."""
DATA_CACHE = ".trainctl-data-cache"
"""The launchers' cache of `s3://` inputs, a folder at the top of the PVC (trainer/launcher/data_cache.py)."""
_SECRET_KEY = re.compile(r"^[-._a-zA-Z0-9]+$")


def quantity(mib: int) -> str:
    """A Kubernetes quantity for a MiB count, in Gi when whole."""
    return f"{mib // 1024}Gi" if mib % 1024 == 0 else f"{mib}Mi"


RUN_SUFFIX = "-xxxx"
"""What `trainctl submit` adds to the job's name for each run's object (`-` and 4 hex digits): names are
checked with it, so a job that renders also submits."""


def run_name(job: JobSpec, token: str) -> str:
    """The object of one run: `<job name>-<token>` (4 hex digits); the label trainctl.io/job keeps the name."""
    return f"{job.name}-{token}"


class _Paths:
    """Where the job's inputs, checkpoints and outputs are inside the pod, and the volumes that put them there."""

    def __init__(self, job: JobSpec, section: KubernetesSection, name: str) -> None:
        self.job = job
        self.section = section
        self.name = name  # the run's object: its folder on the PVC
        self.claims: dict[str, str] = {}  # other PVCs (read-only) -> mount path
        self.problems: list[str] = []

    def resolve(self, uri: str, field: str) -> str:
        """A job location as a path in the container: pvc://claim/path, an absolute path, or relative to the PVC."""
        sec = self.section
        if uri.startswith("s3://"):
            return uri  # each pod's launcher stages it into data_cache() (--data-cache) and reads that copy
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

    def run_dir(self) -> str:
        """The run's folder: `<pvc mount>/<job name>/<object name>-<run uid>` (no PVC: the pod's scratch
        /workspace). An object name can be used again once the old object is deleted: the uid (identity.py)
        keeps the new run out of the old one's folder. Without one (`k8s apply`, render), `<object name>`."""
        if self.section.pvc is None:
            return "/workspace"
        uid = uid_of(self.job)
        return f"{self.section.pvc_mount_path}/{self.job.name}/{self.name}" + (f"-{uid}" if uid else "")

    def data_cache(self) -> str:
        """Where the launchers stage `s3://` inputs: on the PVC, beside every job's folder, so every run and
        attempt on that claim reads one verified copy (one pod stages under the cache's lock, the others wait);
        without a PVC, the pod's own scratch emptyDir (each pod fetches its own copy)."""
        return f"{self.section.pvc_mount_path}/{DATA_CACHE}" if self.section.pvc else f"/workspace/{DATA_CACHE}"

    def default_dir(self, leaf: str) -> str:
        return f"{self.run_dir()}/{leaf}"


def _inert(text: str) -> str:
    """Kubelet expands `$(VAR)` in a container's command and env values (and turns `$$` into `$`):
    doubling every `$` makes the text reach the process literally, whatever it holds."""
    return text.replace("$", "$$")


def _env(
    job: JobSpec, paths: dict[str, str], checkpoint_dir: str, output_dir: str, run_dir: str
) -> tuple[list[dict[str, Any]], list[str]]:
    env: list[dict[str, Any]] = [
        {"name": "TRAINER_CHECKPOINT_DIR", "value": checkpoint_dir},
        {"name": "TRAINER_OUTPUT_DIR", "value": output_dir},
        {"name": "TRAINCTL_RUN_DIR", "value": run_dir},
        *({"name": k, "value": v} for k, v in s3_checkpoint_env(job).items()),
        # where the trainer writes its compact failure record: the termination message trainctl reads
        {"name": TERMINATION_LOG_ENV, "value": TERMINATION_LOG},
    ]
    # The node the pod runs on (downward API): the trainer names it in failure.json's suspects
    # (trainer/heartbeat.py node_name), and that is the name a retry's node anti-affinity leaves out.
    node = [{"name": NODE_NAME_ENV, "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}}]
    env += [{"name": k, "value": v} for k, v in {**data_env(paths), **stream_env(job)}.items()]
    env += [{"name": k, "value": v} for k, v in sorted(job.process_env.items())]
    env += [{"name": "TRAINER_FUNCTION_LOG", "value": "1"}] if ENV_SHA in job.process_env else []  # runs/results.py
    env = [{**e, "value": _inert(e["value"])} for e in env] + node
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


def security_contexts() -> tuple[dict[str, Any], dict[str, Any]]:
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


@dataclass
class PodParts:
    """The pieces of a trainctl pod, before an API decides where each one goes."""

    command: list[str]
    env: list[dict[str, Any]]
    resources: dict[str, Any]
    pod_security: dict[str, Any]
    container_security: dict[str, Any]
    base_mounts: list[dict[str, Any]]  # /dev/shm and scratch (ClusterTrainingRuntime has them too)
    base_volumes: list[dict[str, Any]]
    claim_mounts: list[dict[str, Any]] = field(default_factory=list)  # the job's PVCs
    claim_volumes: list[dict[str, Any]] = field(default_factory=list)


def pod_parts(job: JobSpec, sec: KubernetesSection, problems: list[str], name: str | None = None) -> PodParts:
    """The pod pieces of the run whose object is `name` (default: the job's name, what render shows and
    `trainctl k8s apply` applies); problems (field, value, what is accepted) are appended to `problems`."""
    paths = _Paths(job, sec, name or job.name)
    data_paths = {name: paths.resolve(uri, f"data.{name}") for name, uri in sorted(job.data.items())}
    given_ckpt = job.checkpoint.dir if not s3_checkpoint(job) else None  # s3://: mirrored by the trainer
    checkpoint_dir = paths.resolve(given_ckpt, "checkpoint.dir") if given_ckpt else paths.default_dir("checkpoints")
    problems += s3_checkpoint_problems(job)
    # an s3:// output_dir: written on the PVC in the run's folder, uploaded by node 0's launcher (--output-s3)
    given = job.output_dir if job.output_dir and not s3_output(job) else None
    output_dir = paths.resolve(given, "output_dir") if given else paths.default_dir("output")
    problems += s3_output_problems(job, None, None)
    if job.trainer is not None:
        for name in ("train_data", "val_data"):
            value = getattr(job.trainer, name)
            if value is not None and not value.startswith(("/", "${")):
                problems.append(
                    f"trainer.{name}: got {value!r}; in a pod the trainer reads it as is, so give an absolute path, "
                    f"or name the input under data: (relative paths there are read on the PVC, pvc:// works too)"
                )
    work_dir = paths.default_dir("work")  # created by the launcher (a TrainJob has no workingDir)
    # s3:// inputs: each pod's launcher stages them (trainer/launcher/data_cache.py), as a SLURM node's does
    cache = ["--data-cache", paths.data_cache()] if s3_inputs(job) else []
    argv = launcher_argv(
        job,
        program_argv(job, data_paths=data_paths, checkpoint_dir=checkpoint_dir, output_dir=output_dir),
        launcher=[*LAUNCHER, "--workdir", work_dir, *cache],
    )
    env, secret_problems = _env(job, data_paths, checkpoint_dir, output_dir, paths.run_dir())
    problems += paths.problems + secret_problems
    pod_security, container_security = security_contexts()
    parts = PodParts(
        command=[_inert(a) for a in argv],
        env=env,
        resources=_resources(job),
        pod_security=pod_security,
        container_security=container_security,
        base_mounts=[{"name": "dshm", "mountPath": "/dev/shm"}]
        + [{"name": SCRATCH, "mountPath": path, "subPath": sub} for path, sub in SCRATCH_MOUNTS],
        base_volumes=[
            {"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": quantity(parse_memory_mib(sec.shm_size))}},
            {"name": SCRATCH, "emptyDir": {}},
        ],
    )
    if sec.pvc is not None:
        parts.claim_mounts.append({"name": "pvc", "mountPath": sec.pvc_mount_path})
        parts.claim_volumes.append({"name": "pvc", "persistentVolumeClaim": {"claimName": sec.pvc}})
    for i, (claim, mount) in enumerate(sorted(paths.claims.items())):
        parts.claim_mounts.append({"name": f"pvc-{i}", "mountPath": mount, "readOnly": True})
        parts.claim_volumes.append(
            {"name": f"pvc-{i}", "persistentVolumeClaim": {"claimName": claim, "readOnly": True}}
        )
    bundle = code_bundle(job)
    if bundle is not None:  # the ConfigMap the engine creates beside the job (code.py)
        code_volume, code_mount, code_env = code_pod_parts(job, bundle, name or job.name, work_dir)
        parts.claim_volumes.append(code_volume)
        parts.claim_mounts.append(code_mount)
        extra = {**code_env, **provenance_env(job, bundle.sha256)}
        parts.env += [{"name": k, "value": v} for k, v in extra.items()]
    return parts


HOSTNAME_LABEL = "kubernetes.io/hostname"  # the well-known label every kubelet sets on its Node


def avoiding_nodes(affinity: dict[str, Any] | None, nodes: Sequence[str]) -> dict[str, Any] | None:
    """`affinity` with a required node anti-affinity against `nodes` (`kubernetes.io/hostname NotIn`), the
    nodes a retry leaves out. The scheduler ORs nodeSelectorTerms and ANDs the requirements inside one
    (component-helpers/scheduling/corev1/nodeaffinity/nodeaffinity.go `LazyErrorNodeSelector.Match`,
    `nodeSelectorTerm.match`), so the NotIn joins every term the user wrote (none: it is the one term);
    preferred terms and pod (anti-)affinity are kept as they are. No nodes: `affinity` unchanged."""
    if not nodes:
        return affinity
    avoid = {"key": HOSTNAME_LABEL, "operator": "NotIn", "values": sorted(set(nodes))}
    merged = tree_copy(affinity or {})
    node_affinity = merged.setdefault("nodeAffinity", {})
    required = node_affinity.setdefault("requiredDuringSchedulingIgnoredDuringExecution", {})
    terms = required.get("nodeSelectorTerms") or [{}]
    for term in terms:
        term["matchExpressions"] = [*(term.get("matchExpressions") or []), avoid]
    required["nodeSelectorTerms"] = terms
    return merged


def pod_scheduling(sec: KubernetesSection, avoid_nodes: Sequence[str] = ()) -> dict[str, Any]:
    """The pod spec's scheduling fields the section sets (service account, pull secrets, node selector,
    tolerations, affinity, priority class, scheduler), in one order for both APIs; a field left unset is
    left out, so the pod keeps what its template says. `avoid_nodes`: the nodes earlier attempts blamed,
    which a retry's pods must not land on (`avoiding_nodes`, merged into the section's affinity).

    `serviceAccountName` only when one is named: a PyTorchJob's pod then runs as the namespace's default
    account. A TrainJob writes this into a runtime patch, which Trainer v2.3.0 strategic-merges over the
    ClusterTrainingRuntime's pod (`mergeRuntimePatches`, tests/kubernetes/port_trainer.py build_jobset), and
    k8s/trainingruntimes.yaml names trainctl-trainer: an omitted field keeps it, so a TrainJob can only
    name another account and trainjob.cannot_express refuses null. The TrainJob refuses priority_class and
    scheduler_name the same way (a runtime patch has no such field)."""
    spec: dict[str, Any] = {}
    if sec.service_account:
        spec["serviceAccountName"] = sec.service_account
    if sec.image_pull_secrets:
        spec["imagePullSecrets"] = [{"name": n} for n in sec.image_pull_secrets]
    if sec.node_selector:
        spec["nodeSelector"] = dict(sorted(sec.node_selector.items()))
    if sec.tolerations:
        spec["tolerations"] = [dict(t) for t in sec.tolerations]
    affinity = avoiding_nodes(sec.affinity, avoid_nodes)
    if affinity:
        spec["affinity"] = affinity
    if sec.priority_class:
        spec["priorityClassName"] = sec.priority_class
    if sec.scheduler_name:
        spec["schedulerName"] = sec.scheduler_name
    return spec


def node_addrs_env(job: JobSpec, addrs: list[str]) -> list[dict[str, Any]]:
    """`launch: per_node`: the pods' DNS names, in node-rank order, for the launcher to pass on (no Kubeflow
    variable lists the pods; trainer/launcher/launch_modes.py NODE_ADDRS_ENV, which the launcher sets one per line)."""
    return [{"name": "TRAINCTL_NODE_ADDRS", "value": " ".join(addrs)}] if job.launch == "per_node" else []


def pod_labels(job: JobSpec, sec: KubernetesSection) -> dict[str, str]:
    return {**sec.labels, **MANAGED_BY, JOB_LABEL: job.name}


def tree_copy(value: Any) -> Any:
    """A deep copy of JSON-like data (dicts, lists, scalars), several times faster than `copy.deepcopy`."""
    kind = type(value)
    if kind is dict:
        return {k: tree_copy(v) for k, v in value.items()}
    if kind is list:
        return [tree_copy(v) for v in value]
    if kind in (str, int, bool, float) or value is None:
        return value
    return copy.deepcopy(value)

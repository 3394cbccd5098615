"""The only code that talks to a Kubernetes API server (the official `kubernetes` client, imported here only)."""

from __future__ import annotations

import json
import random
from collections.abc import Sequence
from typing import Any

from ...errors import EngineError
from ...function import LOG_MARK as FUNCTION_LOG_MARK
from ...runs import records as run_records
from ...runs.identity import uid_of, with_identity
from ...runs.log_frames import log_files
from ...runs.state import Paths, RunRef, RunStatus
from ...spec.job_spec import JobSpec
from ...submit.bundle import prepare
from .attempts import current_object, is_driven
from .causes import start_failure, termination_record
from .cluster import TIMEOUT, Cluster, connect
from .handle import KubernetesHandle
from .kinds import KINDS, TRAINJOB, Kind
from .logs import logs, progress
from .objects import find_job, get_job, list_pods, meta_of, pods_of, run_cluster
from .pod import run_name
from .render import build_manifest, run_paths
from .section import KubernetesSection
from .status import job_status, pod_image_ids, why_not_started

FIELD_MANAGER = "trainctl"
__all__ = ["cancel", "create", "logs", "progress", "status", "status_many", "submit"]


def kind_of(manifest: dict[str, Any]) -> Kind:
    return next(k for k in KINDS.values() if k.kind == manifest["kind"])


def apply_manifest(
    cluster: Cluster, manifest: dict[str, Any], *, dry_run: bool = False, force: bool = False
) -> tuple[dict[str, Any], str]:
    """Server-side apply; returns the object and what happened: created, unchanged or updated.

    A changed spec on a job the operator has already started is refused: the operator does not roll running
    pods, so an "update" would silently do nothing.
    """
    api = cluster.custom()
    kind = kind_of(manifest)
    name = meta_of(manifest)["name"]
    ns = cluster.namespace
    manifest = {**manifest, "metadata": {**meta_of(manifest), "namespace": ns}}
    before = get_job(cluster, name, kind)

    def ssa(dry: bool) -> dict[str, Any]:
        # Raw response: the generated client maps only 200 to a body type and returns None for 201 Created.
        resp = cluster.call(
            api.patch_namespaced_custom_object, kind.group, kind.version, ns, kind.plural, name, manifest,
            field_manager=FIELD_MANAGER, force=force, dry_run="All" if dry else None,
            _content_type="application/apply-patch+yaml", _request_timeout=TIMEOUT, _preload_content=False,
            verb="patch", resource=kind.resource, name=name,
        )  # fmt: skip
        result: dict[str, Any] = json.loads(resp.data)
        return result

    if before is None:
        return ssa(dry_run), "created"
    try:
        preview = ssa(True)
    except EngineError as exc:
        if kind is TRAINJOB and "immutable" in str(exc):
            raise EngineError(
                f"TrainJob {ns}/{name} already exists with a different spec; {exc}",
                hint=f"a TrainJob's trainer settings cannot change: delete it first (`trainctl k8s delete {name} "
                f"-n {ns}`) or give the changed job another name",
            ) from None
        raise
    changed = meta_of(preview).get("generation") != meta_of(before).get("generation") or any(
        meta_of(preview).get(k) != meta_of(before).get(k) for k in ("labels", "annotations")
    )
    started = bool((before.get("status") or {}).get("conditions") or (before.get("status") or {}).get("jobsStatus"))
    if changed and started:
        operator = "Kubeflow Trainer" if kind is TRAINJOB else "operator"
        raise EngineError(
            f"{kind.kind} {ns}/{name} already exists with a different spec, and the {operator} has started it "
            "(it does not roll running pods, so an update would do nothing)",
            hint=f"delete it first (`trainctl k8s delete {name} -n {ns}`) or give the changed job another name",
        )
    if dry_run:
        return preview, "updated" if changed else "unchanged"
    return ssa(False), "updated" if changed else "unchanged"


def with_section(job: JobSpec, context: str | None, namespace: str | None) -> JobSpec:
    """The job with `context`/`namespace` (submit options) over its kubernetes section's."""
    sec = job.section("kubernetes")
    updates = {k: v for k, v in {"context": context, "namespace": namespace}.items() if v is not None}
    return job.model_copy(update={"kubernetes": sec.model_copy(update=updates)}) if updates else job


def submit(job: JobSpec, *, apply: bool = False, dry_run: bool = False, **options: Any) -> RunRef:
    """A new run: one object (`create`, whose keywords `options` are: context, namespace, kubeconfig, force,
    seed). With `retries`, trainctl retries it (driven.py): the cluster's controller, else, for `submit`,
    a driver on this machine; `trainctl k8s apply` (declarative: the object is the run) starts none."""
    if job.retries and not apply and not dry_run:
        from .driven import start

        return start(with_identity(prepare(job)), create, **options)  # one uid for every attempt's object
    run = create(job, apply=apply, dry_run=dry_run, **options)
    if job.retries and apply and not dry_run:
        from .presence import controller_for

        ns = run.native_id.partition("/")[0]
        handle = KubernetesHandle.of(run)
        presence = controller_for(connect(handle.context, ns, handle.kubeconfig), ns)
        if not presence.answers:
            import warnings

            warnings.warn(f"{run.id}: {presence.words}; its retries start once one runs "
                          "(`kubectl apply -k k8s/`)", stacklevel=2)  # fmt: skip
    return run


def create(
    job: JobSpec,
    *,
    context: str | None = None,
    namespace: str | None = None,
    kubeconfig: str | None = None,
    dry_run: bool = False,
    force: bool = False,
    apply: bool = False,
    seed: str | None = None,
    avoid_nodes: Sequence[str] = (),
    name: str | None = None,
) -> RunRef:
    """Create one TrainJob or PyTorchJob, named `name` or `<job name>-<4 hex>` (its folder on the PVC
    too); with `apply` (`trainctl k8s apply`) server-side apply the job's own name, the object being the
    run. `context`/`namespace` override the job's kubernetes section. `seed` (`--resume-from` a run on the
    same PVC, or the previous attempt): the folder whose checkpoints the new object's pods copy into their
    own first (seed.py). `avoid_nodes`: the nodes earlier attempts blamed (causes.avoided): the pods get a
    required node anti-affinity against them."""
    job = prepare(job)  # its code bundle packed, if not yet (render reads it)
    # its uid; an applied object is the run (declarative: applied again, it is the same run, in the same folder)
    job = with_section(job.with_identity(None) if apply else with_identity(job), context, namespace)
    sec = job.section_as("kubernetes", KubernetesSection)
    ns, ctx = sec.namespace, sec.context
    cluster = connect(ctx, ns, kubeconfig)
    manifest = build_manifest(job, name or (job.name if apply else _free_name(cluster, job)), avoid_nodes)
    paths = run_paths(manifest)
    if seed is not None:
        from .seed import seeded

        manifest = seeded(manifest, seed, paths["checkpoint_dir"], whole=job.trainer is None)
    obj, outcome = apply_manifest(cluster, manifest, dry_run=dry_run, force=force)
    name = meta_of(manifest)["name"]
    if not dry_run:
        _apply_code(cluster, job, ns, obj, name)
    handle = KubernetesHandle(
        context=ctx, kubeconfig=kubeconfig, api=kind_of(manifest).api, apply=outcome, uid=meta_of(obj).get("uid"),
        dry_run=dry_run, pvc=sec.pvc, pvc_mount_path=sec.pvc_mount_path,
    )  # fmt: skip
    return RunRef(target="kubernetes", native_id=f"{ns}/{name}", job_name=job.name, run_uid=uid_of(job),
                  paths=Paths(**paths), handle=handle)  # fmt: skip


NAME_TOKENS = random.SystemRandom()
"""Where the 4 hex digits of a run's object name come from (a test seeds its own to force a repeat)."""


def _free_name(cluster: Cluster, job: JobSpec) -> str:
    """`<job name>-<4 hex>` that no TrainJob or PyTorchJob of the namespace has yet. Only 65,536 per job name, so
    a deleted run's name comes back: its folder on the PVC does not (pod.py run_dir: the run's uid)."""
    kind = KINDS[job.section_as("kubernetes", KubernetesSection).api]
    for _ in range(20):
        name = run_name(job, f"{NAME_TOKENS.getrandbits(16):04x}")
        if get_job(cluster, name, kind) is None:
            return name
    raise EngineError(f"no free name {job.name}-<4 hex> in namespace {cluster.namespace} after 20 tries")


def _apply_code(cluster: Cluster, job: JobSpec, ns: str, obj: dict[str, Any], name: str) -> None:
    """The code bundle's ConfigMap, owned by the run's object (deleted with it); kept if there (a re-apply)."""
    from .code import code_bundle, configmap

    bundle = code_bundle(job)  # the prepared one (bundle.prepare): nothing is packed here
    if bundle is None:
        return
    m = meta_of(obj)
    owner = {"apiVersion": obj.get("apiVersion"), "kind": obj.get("kind"), "name": m.get("name"), "uid": m.get("uid")}
    body = configmap(job, bundle, ns, owner, name)
    try:
        cluster.call(cluster.core().create_namespaced_config_map, ns, body, verb="create", resource="configmaps")
    except EngineError as exc:
        if "AlreadyExists" not in str(exc) and "already exists" not in str(exc):
            raise


# ---- status ----


def _events(cluster: Cluster, names: list[str]) -> list[dict[str, Any]]:
    """Events about the job and its pods (what Kueue, the scheduler and quota admission said)."""
    found = cluster.get(f"/api/v1/namespaces/{cluster.namespace}/events", verb="list", resource="events")
    wanted = set(names)
    return [
        e for e in json.loads(found.data).get("items") or [] if (e.get("involvedObject") or {}).get("name") in wanted
    ]


def status(run: RunRef) -> RunStatus:
    """The run's object's state; with trainctl's retries, the current attempt's under the run's record."""
    from .driven import overlay

    cluster, root_name = run_cluster(run)
    kind, root = find_job(cluster, root_name, KubernetesHandle.of(run).api)
    name = current_object(root, root_name)
    obj = root if name == root_name else get_job(cluster, name, kind)
    return overlay(run, cluster, root, _object_status(cluster, kind, name, obj))


def _object_status(cluster: Cluster, kind: Kind, name: str, obj: dict[str, Any] | None) -> RunStatus:
    if obj is None:
        return job_status(kind, None, {})
    pods = pods_of(cluster, kind, name)
    phases = {label: str((pod.get("status") or {}).get("phase") or "Unknown") for _, label, pod in pods}
    pod_objs = [pod for _, _, pod in pods]
    why = None
    if not phases or any(p != "Running" for p in phases.values()):  # none or one still waits: the cluster may say why
        why = why_not_started(obj, pod_objs, _events(cluster, [name, *(meta_of(p)["name"] for p in pod_objs)]))
    found = job_status(kind, obj, phases, why, pod_image_ids(pod_objs, kind.container))
    # what the trainer said, from outside the cluster; else what the runtime said of a container it could not start
    failure = run_records.failure(termination_record(pod_objs) or start_failure(pod_objs))
    return found if failure is None else found.model_copy(update={"failure": failure})


def status_many(runs: Sequence[RunRef]) -> dict[str, RunStatus]:
    """Every run's status from one list call per kind and namespace (`trainctl list --refresh`), plus, while a
    TrainJob has no condition that settles its state, one list of that kind's pods (a TrainJob has no Running
    condition: running is read from its pods). No events are read: why a job waits is `status`'s to say."""
    groups: dict[tuple[str | None, str | None, str], list[RunRef]] = {}
    for run in runs:
        handle = KubernetesHandle.of(run)
        groups.setdefault((handle.context, handle.kubeconfig, run.native_id.partition("/")[0]), []).append(run)
    statuses: dict[str, RunStatus] = {}
    for (context, kubeconfig, namespace), group in groups.items():
        if not group:
            continue
        cluster = connect(context, namespace, kubeconfig)
        apis = {KubernetesHandle.of(run).api for run in group}
        kinds = [k for k in KINDS.values() if k.api in apis or None in apis]
        objects = {(k.api, meta_of(obj).get("name")): obj for k in kinds for obj in _list(cluster, k)}
        phases: dict[tuple[str, str], dict[str, str]] = {}
        for kind in kinds:
            mine = [o for (api, _), o in objects.items() if api == kind.api]
            if kind is TRAINJOB and any(not job_status(kind, o, {}).state.finished for o in mine):
                phases.update(_phases(cluster, kind))
        for run in group:
            name = run.native_id.partition("/")[2]
            found = [(k, objects[(k.api, name)]) for k in kinds if (k.api, name) in objects]
            kind, obj = found[0] if found else (KINDS.get(KubernetesHandle.of(run).api or "", TRAINJOB), None)
            if is_driven(obj) or (obj is None and KubernetesHandle.of(run).driver_dir):  # trainctl's retries
                statuses[run.id] = status(run)
                continue
            statuses[run.id] = job_status(kind, obj, phases.get((kind.api, name), {}))
    return statuses


def _list(cluster: Cluster, kind: Kind) -> list[dict[str, Any]]:
    """Every object of `kind` in the cluster's namespace (none when the cluster lacks its CRD)."""
    if cluster.crd_installed(kind.resource) is False:
        return []
    found = cluster.call(
        cluster.custom().list_namespaced_custom_object, kind.group, kind.version, cluster.namespace, kind.plural,
        _request_timeout=TIMEOUT, verb="list", resource=kind.resource,
    )  # fmt: skip
    items: list[dict[str, Any]] = found.get("items", [])
    return items


def _phases(cluster: Cluster, kind: Kind) -> dict[tuple[str, str], dict[str, str]]:
    """{(api, job name): {pod label: phase}} of every pod of `kind` in the namespace, from one list call."""
    phases: dict[tuple[str, str], dict[str, str]] = {}
    for pod in list_pods(cluster, kind.pod_label)[0]:
        labels = meta_of(pod).get("labels") or {}
        _, _, label = kind.pod_key(labels, meta_of(pod).get("annotations") or {})
        phase = str((pod.get("status") or {}).get("phase") or "Unknown")
        phases.setdefault((kind.api, str(labels.get(kind.pod_label))), {})[label] = phase
    return phases


def list_jobs(cluster: Cluster) -> list[dict[str, Any]]:
    """Every TrainJob and PyTorchJob in the namespace with its state, oldest first (a kind whose CRD the
    cluster lacks is skipped)."""
    rows = []
    for kind in KINDS.values():
        for obj in _list(cluster, kind):
            st = job_status(kind, obj, {})
            meta = meta_of(obj)
            rows.append(
                {
                    "name": meta.get("name"),
                    "namespace": meta.get("namespace"),
                    "kind": kind.kind,
                    "state": st.state.value,
                    "condition": st.native_state,
                    "created": meta.get("creationTimestamp"),
                    "managed_by_trainctl": (meta.get("labels") or {}).get("app.kubernetes.io/managed-by") == "trainctl",
                }
            )
    return sorted(rows, key=lambda r: (str(r["created"]), str(r["name"])))


# ---- cancel ----


def delete_job(cluster: Cluster, name: str, kind: Kind = TRAINJOB) -> None:
    api = cluster.custom()
    cluster.call(
        api.delete_namespaced_custom_object, kind.group, kind.version, cluster.namespace, kind.plural, name,
        propagation_policy="Background", _request_timeout=TIMEOUT, verb="delete", resource=kind.resource, name=name,
    )  # fmt: skip


def cancel(run: RunRef) -> None:
    """Delete the run's object. With trainctl's retries: this machine's driver stopped first (it starts no
    further attempt), the run recorded cancelled on its object, and its attempts deleted too (a controller
    sees the run's object gone and stops)."""
    from .driven import stop_driver
    from .reconcile import Runs

    stop_driver(run)
    cluster, name = run_cluster(run)
    kind, obj = find_job(cluster, name, KubernetesHandle.of(run).api)
    if obj is not None and is_driven(obj):
        Runs(cluster, None, lambda _: None).cancel(kind, obj)
        return
    if obj is None and KubernetesHandle.of(run).api is None:
        raise EngineError(f"404 Not Found: no TrainJob or PyTorchJob {name!r} in namespace {cluster.namespace!r}")
    try:
        delete_job(cluster, name, kind)
    except EngineError as exc:
        if not (KubernetesHandle.of(run).driver_dir and "Not Found" in str(exc)):
            raise


def function_results(run: RunRef) -> dict[str, bytes]:
    """A function job's results, from its pods' logs (the API server's, so from outside the cluster too): each
    rank prints them there besides writing them to the PVC (trainer/function.py)."""
    return log_files(logs(run), FUNCTION_LOG_MARK, r"rank-\d+\.(?:json|pkl)")

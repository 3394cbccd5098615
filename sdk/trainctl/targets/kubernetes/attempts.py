"""A Kubernetes run that trainctl retries, kept on its own object (pure: no I/O, no kubernetes import).

The run's object (attempt 1, what `trainctl submit` or `trainctl k8s apply` created) carries the label
`trainctl.dev/retries: "N"` and the annotation `trainctl.dev/retry-on`; its operator's own restarts are off
(render: runtime `trainctl-torch-r0`, restartPolicy Never), because they cannot leave a node out. Whoever
drives the run, the in-cluster controller (controller.py) or, without one, the submitting machine's driver
(driver.py), runs the same steps (reconcile.py) and writes what it decided onto that object:

    trainctl.dev/attempts   every ended attempt (run_state.Attempt as JSON), in order
    trainctl.dev/outcome    {"state", "exit_code", "reason"} once the run has ended

Attempt N > 1 is the object `<run>-aN`, made from the run's object by `next_attempt` (the controller has
no job file, only what the cluster holds): the same spec, in the folder render gives the object `<run>-aN`,
seeded from attempt N-1's checkpoints, with a required node anti-affinity against every node blamed so far,
owned by the run's object (deleting the run deletes its attempts). Every write is keyed by the attempt number: the annotations are updated with
the object's resourceVersion as a precondition, and attempt N's object has one possible name, so a driver
restarted mid-decision, or two at once, never loses or doubles an attempt.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from ...runs.causes import AttemptEnd, end_line, why_not_retried
from ...runs.state import Attempt, RunState
from .labels import ATTEMPT_OF_LABEL, ATTEMPTS, OUTCOME, RETRIES_LABEL, RETRY_ON, SEED
from .pod import avoiding_nodes
from .render import run_paths
from .seed import seeded

NODE_ADDRS = "TRAINCTL_NODE_ADDRS"  # pod.node_addrs_env: `launch: per_node` names each node's pod

__all__ = ["ATTEMPTS", "ATTEMPT_OF_LABEL", "OUTCOME", "RETRIES_LABEL", "RETRY_ON", "next_attempt", "record_of"]


def attempt_name(run: str, number: int) -> str:
    """Attempt 1 is the run's own object; attempt N its `-aN`."""
    return run if number == 1 else f"{run}-a{number}"


def _meta(obj: dict[str, Any]) -> dict[str, Any]:
    return obj.get("metadata") or {}


def is_driven(obj: dict[str, Any] | None) -> bool:
    return obj is not None and RETRIES_LABEL in (_meta(obj).get("labels") or {})


@dataclass
class Record:
    """What the run's object says about its attempts."""

    retries: int
    retry_on: list[str]
    ended: list[Attempt] = field(default_factory=list)
    outcome: dict[str, Any] | None = None

    @property
    def current(self) -> int:
        """The attempt under way (or, once the run ended, the last one)."""
        return len(self.ended) if self.outcome is not None and self.ended else len(self.ended) + 1


def record_of(obj: dict[str, Any]) -> Record:
    meta = _meta(obj)
    labels, notes = meta.get("labels") or {}, meta.get("annotations") or {}
    ended = [Attempt.model_validate(a) for a in _json(notes.get(ATTEMPTS), []) if isinstance(a, dict)]
    outcome = _json(notes.get(OUTCOME), None)
    retry_on = [c for c in str(notes.get(RETRY_ON) or "").split(",") if c]
    return Record(int(labels.get(RETRIES_LABEL) or 0), retry_on, ended, outcome if isinstance(outcome, dict) else None)


def current_object(run: dict[str, Any] | None, name: str) -> str:
    """The object of the current (or last) attempt of the run whose object, named `name`, is `run`."""
    return attempt_name(name, record_of(run).current) if run is not None and is_driven(run) else name


def _json(text: Any, default: Any) -> Any:
    try:
        return json.loads(text) if text else default
    except ValueError:
        return default


def record_patch(obj: dict[str, Any], ended: Sequence[Attempt], outcome: dict[str, Any] | None) -> dict[str, Any]:
    """The merge patch that records `ended` (and the outcome) on the run's object, valid only against the
    version read (`resourceVersion`: the API server answers 409 Conflict to a patch of an older one)."""
    notes = {ATTEMPTS: json.dumps([a.model_dump(mode="json", exclude_none=True) for a in ended])}
    if outcome is not None:
        notes[OUTCOME] = json.dumps(outcome, sort_keys=True)
    return {"metadata": {"resourceVersion": _meta(obj).get("resourceVersion"), "annotations": notes}}


@dataclass(frozen=True)
class Decision:
    """An ended attempt, and what follows it: `retry` another, else the run's `outcome`."""

    attempt: Attempt
    said: str
    outcome: dict[str, Any] | None

    @property
    def retry(self) -> bool:
        return self.outcome is None


def decide(record: Record, attempt: Attempt, end: str, object_name: str) -> Decision:
    """The run's one retry decision after attempt `attempt` ended `end` (succeeded, failed, gone)."""
    if end != "succeeded" and attempt.cause is None:  # the object failed with no pod failing (a deadline)
        attempt = attempt.model_copy(update={"state": RunState.FAILED, "reason": f"{object_name}: {end}"})
    if end == "succeeded":
        attempt = attempt.model_copy(update={"state": RunState.SUCCEEDED, "exit_code": 0, "cause": None})
        return Decision(attempt, "succeeded", {"state": "succeeded", "exit_code": 0, "reason": ""})
    if attempt.cause is None:
        said = f"attempt {attempt.number} ended: {end}; not retried"
        reason = f"attempt {attempt.number}: {end}"
        return Decision(attempt, said, {"state": "failed", "exit_code": attempt.exit_code, "reason": reason})
    why = why_not_retried(attempt.cause, record.retry_on, attempt.number, record.retries)
    ended = AttemptEnd(attempt.cause, tuple(attempt.blamed_nodes), attempt.exit_code)
    said = end_line(attempt.number, ended, why, attempt.number, record.retries)
    if why:
        reason = f"attempt {attempt.number}: {ended.words}"
        return Decision(attempt, said, {"state": "failed", "exit_code": attempt.exit_code, "reason": reason})
    return Decision(attempt, said, None)


def cancelled(record: Record, number: int, engine_id: str, started_at: float | None, now: float) -> Decision:
    attempt = Attempt(number=number, engine_id=engine_id, state=RunState.CANCELLED, started_at=started_at, ended_at=now)
    return Decision(attempt, "cancelled", {"state": "cancelled", "exit_code": None, "reason": "cancelled"})


def pod_specs(manifest: dict[str, Any]) -> list[dict[str, Any]]:
    """The pod specs of a TrainJob (its trainctl runtime patch's) or a PyTorchJob (each replica's)."""
    spec = manifest["spec"]
    if manifest["kind"] != "TrainJob":
        return [r["template"].setdefault("spec", {}) for r in spec["pytorchReplicaSpecs"].values()]
    patches = spec.setdefault("runtimePatches", [])
    if not patches:  # a TrainJob applied by hand without trainctl's patch
        patches.append({"manager": "trainctl.io/trainctl", "trainingRuntimeSpec": {}})
    jobs = patches[0].setdefault("trainingRuntimeSpec", {}).setdefault("template", {}).setdefault("spec", {})
    replicated = jobs.setdefault("replicatedJobs", [{"name": "node"}])
    return [r.setdefault("template", {}).setdefault("spec", {}).setdefault("template", {}).setdefault("spec", {})
            for r in replicated]  # fmt: skip


def next_attempt(run: dict[str, Any], number: int, avoid_nodes: Sequence[str]) -> dict[str, Any]:
    """Attempt `number` (> 1) of the run whose object is `run`: its spec, renamed `<run>-aN`, owned by the run's
    object, its pods kept off `avoid_nodes`; `launch: per_node` node addresses follow the new name."""
    meta = _meta(run)
    root, name = str(meta["name"]), attempt_name(str(meta["name"]), number)
    labels = {k: v for k, v in (meta.get("labels") or {}).items() if k != RETRIES_LABEL} | {ATTEMPT_OF_LABEL: root}
    notes = {k: v for k, v in (meta.get("annotations") or {}).items() if not k.startswith("trainctl.dev/")}
    owner = {"apiVersion": run["apiVersion"], "kind": run["kind"], "name": root, "uid": meta.get("uid"),
             "controller": False, "blockOwnerDeletion": False}  # fmt: skip
    metadata = {"name": name, "namespace": meta.get("namespace"), "labels": labels, "ownerReferences": [owner]}
    out = {"apiVersion": run["apiVersion"], "kind": run["kind"], "metadata": metadata | ({"annotations": notes}
           if notes else {}), "spec": copy.deepcopy(run["spec"])}  # fmt: skip
    for pod in pod_specs(out):
        affinity = avoiding_nodes(pod.get("affinity"), avoid_nodes)
        if affinity:
            pod["affinity"] = affinity
    for env in _envs(out):
        for item in env:
            if item.get("name") == NODE_ADDRS:
                item["value"] = " ".join(_renamed(a, root, name) for a in str(item.get("value", "")).split())
    return _in_own_folder(out, run, number)


def _in_own_folder(out: dict[str, Any], run: dict[str, Any], number: int) -> dict[str, Any]:
    """Attempt `number` in a folder of its own (`<run>-aN-<uid>` beside the run's): a pod of an earlier attempt
    that the cluster cannot confirm dead (a partitioned node) never writes into it. With the folders on a PVC,
    its pods first copy attempt N-1's checkpoints in (seed.py), and resume from them."""
    root = str(_meta(run)["name"])
    paths = run_paths(run)
    folder = {k: attempt_name(root, k) for k in (number - 1, number)}
    dirs = {k: _folder(paths["run_dir"], root, n) for k, n in folder.items()}
    old = paths["run_dir"]

    def moved(value: str) -> str:
        return dirs[number] + value[len(old) :] if value == old or value.startswith(f"{old}/") else value

    for env in _envs(out):
        for item in env:
            if "value" in item:
                item["value"] = moved(str(item["value"]))
    for container in _trainers(out):
        for key in ("command", "args"):
            if key in container:
                container[key] = [moved(str(word)) for word in container[key]]
    checkpoints = {k: d + paths["checkpoint_dir"][len(old) :] for k, d in dirs.items()}
    if not paths["checkpoint_dir"].startswith(f"{old}/") or not _on_a_claim(out):
        return out  # the user's own checkpoint folder (shared by every attempt), or the pods' emptyDir (gone)
    whole = (_meta(run).get("annotations") or {}).get(SEED) == "all"
    return seeded(out, checkpoints[number - 1], checkpoints[number], whole)


def _folder(run_dir: str, root: str, name: str) -> str:
    """`<parent>/<root>-<uid>` -> `<parent>/<name>-<uid>` (render's folder of the object `name`)."""
    parent, _, base = run_dir.rpartition("/")
    return f"{parent}/{name}{base[len(root) :]}" if base.startswith(root) else run_dir


def _on_a_claim(manifest: dict[str, Any]) -> bool:
    return any("persistentVolumeClaim" in v for spec in pod_specs(manifest) for v in spec.get("volumes") or [])


def _trainers(manifest: dict[str, Any]) -> list[dict[str, Any]]:
    """The containers that run the launcher: a TrainJob's `spec.trainer`, each PyTorchJob replica's first."""
    spec = manifest["spec"]
    if manifest["kind"] == "TrainJob":
        return [spec.setdefault("trainer", {})]
    return [r["template"]["spec"]["containers"][0] for r in spec["pytorchReplicaSpecs"].values()]


def _envs(manifest: dict[str, Any]) -> list[list[dict[str, Any]]]:
    return [c.get("env") or [] for c in _trainers(manifest)]


def _renamed(address: str, old: str, new: str) -> str:
    """A pod's DNS name under the new object: `<old>-node-0-1.<old>` -> `<new>-node-0-1.<new>`."""
    host, dot, domain = address.partition(".")
    host = new + host[len(old) :] if host.startswith(f"{old}-") else host
    return host + dot + (new if domain == old else domain)

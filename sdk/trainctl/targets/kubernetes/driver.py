"""`python -m trainctl.targets.kubernetes.driver RUN_DIR`: the retry driver of one Kubernetes run (driven.py).

Started by `submit` in a session of its own, after it created attempt 1. For each attempt it watches the
object until it ends, keeping the last state of every pod it saw (a failed JobSet deletes its pods, the
failing one's terminated status with its termination message is kept from before), classifies the end
(causes.attempt_of), and, when `retries`/`retry_on` allow (causes.why_not_retried), creates the next object with a
required node anti-affinity against every node blamed so far, seeded from the previous attempt's checkpoint
folder on the PVC. `trainctl cancel` (the cancel file, SIGTERM) stops it: it deletes the current object and
records the run cancelled. The folder and its files are detached.RunFolder's, as the local runner keeps them.
"""

from __future__ import annotations

import contextlib
import pickle
import re
import sys
import time
from pathlib import Path
from typing import Any

from ... import causes as rules
from ...errors import EngineError
from ...run_state import Attempt, RunState
from ..detached import RunFolder, StopSignals
from ..processes import read_json
from . import causes, engine
from .cluster import TIMEOUT, Cluster, connect
from .driven import DRIVER, JOB, SPEC, attempt_name, without_operator_restarts
from .kinds import KINDS, Kind
from .objects import get_job, pod_events, pods_of
from .status import job_status

WATCH_S = 1
"""Seconds of each pod watch between two looks at the object (and at the cancel file)."""
RESUMED = re.compile(r"resumed from \S+ at step (\d+)")
"""The trainer's line when it resumes (trainer/checkpointer.py): the step this attempt resumed from."""


def log(text: str) -> None:
    print(f"[trainctl driver {time.strftime('%H:%M:%S')}] {text}", file=sys.stderr, flush=True)


def _resumed_step(cluster: Cluster, kind: Kind, pods: list[Any]) -> int | None:
    """The step the rank-0 pod said it resumed from (the head of its log), or None (not yet, or fresh)."""
    first = [pod for rank, _, pod in pods if rank == 0]
    if not first:
        return None
    try:
        text = cluster.call(
            cluster.core().read_namespaced_pod_log, first[0].metadata.name, cluster.namespace,
            container=kind.container, limit_bytes=1_000_000, _request_timeout=TIMEOUT, verb="get", resource="pods/log",
        )  # fmt: skip
    except EngineError:
        return None
    found = RESUMED.search(str(text))
    return int(found.group(1)) if found else None


def watch(cluster: Cluster, kind: Kind, name: str, folder: RunFolder, stop: StopSignals,
          entry: dict[str, Any]) -> tuple[str, list[dict[str, Any]]]:  # fmt: skip
    """Follow one attempt to its end: ("succeeded" | "failed" | "gone" | "cancelled", each pod's last state).
    Its pods are watched, not polled: a failed JobSet deletes its pods at once, and the failing container's
    terminated state (its exit code, its termination message) is only seen on the way."""
    seen: dict[str, dict[str, Any]] = {}
    version: str | None = None
    next_log = 0.0

    def drain(seconds: int) -> None:
        nonlocal version
        pods, version = pod_events(cluster, kind, name, version, seconds)
        for pod in pods:
            seen[(pod.get("metadata") or {}).get("name", "")] = pod

    while True:
        if stop or folder.cancel_requested:
            return "cancelled", list(seen.values())
        try:
            drain(WATCH_S)
            obj = get_job(cluster, name, kind)
            if obj is None or job_status(kind, obj, {}).state.finished:
                drain(1)  # what the pods did just before the object ended
            if entry.get("resumed_from_step") is None and seen and time.monotonic() >= next_log:
                entry["resumed_from_step"] = _resumed_step(cluster, kind, pods_of(cluster, kind, name))
                next_log = time.monotonic() + 5.0
        except EngineError as exc:  # the API server briefly away: try again
            log(f"watching {kind.kind} {name}: {exc}")
            version = None
            time.sleep(5.0)
            continue
        if obj is None:
            return "gone", list(seen.values())
        state = job_status(kind, obj, {}).state
        if state.finished:
            if entry.get("resumed_from_step") is None:  # a short attempt: its pods' log, once more at the end
                with contextlib.suppress(EngineError):
                    entry["resumed_from_step"] = _resumed_step(cluster, kind, pods_of(cluster, kind, name))
            return state.value, list(seen.values())


def main(run_dir: Path) -> int:
    spec = read_json(run_dir / SPEC)
    if not isinstance(spec, dict):
        print(f"kubernetes retry driver: no readable {SPEC} in {run_dir}", file=sys.stderr)
        return 2
    stop = StopSignals()
    folder = RunFolder(run_dir, DRIVER)
    folder.announce()
    try:
        result = drive(spec, run_dir, folder, stop)
    except Exception as exc:  # the outcome is recorded whatever went wrong: status says it, not "lost"
        log(f"the driver failed: {exc!r}")
        found = read_json(run_dir / "state.json") or {}
        result = {"state": "failed", "exit_code": None, "reason": f"the retry driver failed: {exc}",
                  **{k: found[k] for k in ("object", "attempt", "attempts") if k in found}}  # fmt: skip
    folder.record(result)
    return 0


def drive(spec: dict[str, Any], run_dir: Path, folder: RunFolder, stop: StopSignals) -> dict[str, Any]:
    """Every attempt of the run, to its outcome (exit.json's fields)."""
    job = without_operator_restarts(pickle.loads((run_dir / JOB).read_bytes()))
    kind = KINDS[spec["api"]]
    cluster = connect(spec["context"], spec["namespace"], spec["kubeconfig"])
    retries, retry_on = int(spec["retries"]), spec["retry_on"]
    history: list[Attempt] = []
    number, name, started = 1, spec["first"], float(spec["first_started_at"])
    result: dict[str, Any] = {}
    while True:
        entry: dict[str, Any] = {"number": number, "engine_id": f"{spec['namespace']}/{name}", "started_at": started}
        folder.mark_running(
            attempt=number, object=name, attempts=[*(a.model_dump(mode="json") for a in history), entry]
        )
        end, pods = watch(cluster, kind, name, folder, stop, entry)
        if end == "cancelled" or (end == "gone" and (stop or folder.cancel_requested)):  # cancel deletes it too
            try:
                engine.delete_job(cluster, name, kind)
            except EngineError as exc:
                log(f"cancel: deleting {name}: {exc}")
            history.append(Attempt.model_validate({**entry, "state": "cancelled", "ended_at": time.time()}))
            result = {"state": "cancelled", "exit_code": None, "reason": "cancelled"}
            break
        attempt = causes.attempt_of(number, entry["engine_id"], pods, None, started, time.time())
        attempt = attempt.model_copy(update={"resumed_from_step": entry.get("resumed_from_step")})
        if end != "succeeded" and attempt.cause is None:  # the object failed with no pod failing (a deadline)
            attempt = attempt.model_copy(update={"state": RunState.FAILED, "reason": f"{kind.kind} {name}: {end}"})
        history.append(attempt)
        if end == "succeeded":
            history[-1] = attempt.model_copy(update={"exit_code": 0})
            result = {"state": "succeeded", "exit_code": 0, "reason": ""}
            break
        said = rules.describe(attempt.cause, attempt.exit_code, attempt.blamed_nodes) if attempt.cause else end
        why = rules.why_not_retried(attempt.cause, retry_on, number, retries) if attempt.cause else "not retried"
        if why:
            log(f"attempt {number} ({name}) ended: {said}; {why}")
            result = {"state": "failed", "exit_code": attempt.exit_code, "reason": f"attempt {number}: {said}"}
            break
        avoid = causes.avoided(history)
        number, previous, name = number + 1, name, attempt_name(spec["first"], number + 1)
        seed = _checkpoints(spec, previous)
        log(f"attempt {number - 1} ({previous}) ended: {said}; starting attempt {number} as {name}, "
            f"avoiding {', '.join(avoid) or 'no node'}{f', from the checkpoints in {seed}' if seed else ''}")  # fmt: skip
        started = time.time()
        try:
            engine.create(job, context=spec["context"], namespace=spec["namespace"], kubeconfig=spec["kubeconfig"],
                          name=name, seed=seed, avoid_nodes=avoid)  # fmt: skip
        except Exception as exc:
            log(f"could not create attempt {number}: {exc}")
            result = {"state": "failed", "exit_code": None, "reason": f"could not create attempt {number}: {exc}"}
            break
    return result | {"object": name, "attempt": number, "attempts": [a.model_dump(mode="json") for a in history]}


def _checkpoints(spec: dict[str, Any], previous: str) -> str | None:
    """The previous attempt's checkpoint folder as its pods saw it (on the PVC: the next attempt's pods copy
    it); None without a PVC, where the checkpoints went with the pods' emptyDir."""
    first = spec.get("checkpoint_dir")
    if not spec.get("pvc") or not first:
        return None
    return str(first).replace(f"/{spec['first']}/", f"/{previous}/", 1)


if __name__ == "__main__":
    sys.exit(main(Path(sys.argv[1])))

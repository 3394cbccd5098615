"""The submit side of a run's one tracker run: create it (or find the source's, for `--resume-from`), write
the job's params and provenance and lineage tags, and mark it FAILED when an attempt died with nothing left
in the job to say so (mlflow#10510: a killed run stays RUNNING forever).

MLflow through its REST API (mlflow/server/handlers.py; docs "REST API", api/2.0/mlflow/...), with the
standard library: no MLflow client in the SDK. Credentials are the submitter's own (`MLFLOW_TRACKING_TOKEN`,
or `MLFLOW_TRACKING_USERNAME`/`_PASSWORD`, as the MLflow client reads them); the job's processes get theirs
through `secrets:`. W&B needs nothing at submit: its run is created by the first `wandb.init(id=..., resume=
"allow")`, so the id is generated here (32 hex digits, the form MLflow's run ids have).
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import time
import urllib.error
import urllib.parse
import urllib.request
import uuid
from typing import Any

from ..errors import EngineError
from ..runs.state import Lineage, Provenance, RunRef
from ..spec.job_spec import JobSpec
from ..spec.tracking import TrackerRun

TAG = "trainctl."
BATCH = 100  # MLflow's log-batch: at most 100 params and tags a call (mlflow/utils/validation.py, MAX_PARAMS_TAGS_PER_BATCH)
PARAM_VALUE_MAX = 6000  # MLflow's limit on a param's value (mlflow/utils/validation.py, MAX_PARAM_VAL_LENGTH)


def _headers() -> dict[str, str]:
    token = os.environ.get("MLFLOW_TRACKING_TOKEN")
    if token:
        return {"Authorization": f"Bearer {token}"}
    user, password = os.environ.get("MLFLOW_TRACKING_USERNAME"), os.environ.get("MLFLOW_TRACKING_PASSWORD")
    if user and password:
        return {"Authorization": "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()}
    return {}


def call(uri: str, endpoint: str, body: dict[str, Any] | None = None, query: dict[str, str] | None = None) -> Any:
    """One REST call (POST with a body, else GET); the server's JSON answer, or EngineError naming the error."""
    url = f"{uri}/api/2.0/mlflow/{endpoint}" + (f"?{urllib.parse.urlencode(query)}" if query else "")
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(url, data=data, headers={"Content-Type": "application/json", **_headers()})
    try:
        with urllib.request.urlopen(request, timeout=30) as answer:
            return json.loads(answer.read() or b"{}")
    except urllib.error.HTTPError as exc:
        detail = exc.read().decode(errors="replace")[:500]
        raise EngineError(f"MLflow {endpoint}: HTTP {exc.code}: {detail}") from None
    except (urllib.error.URLError, OSError) as exc:
        raise EngineError(f"MLflow at {uri} cannot be reached ({endpoint}): {exc}") from None


def experiment_id(uri: str, name: str) -> str:
    """The experiment's id, creating it when it does not exist yet."""
    try:
        return str(call(uri, "experiments/get-by-name", query={"experiment_name": name})["experiment"]["experiment_id"])
    except EngineError as exc:
        if "RESOURCE_DOES_NOT_EXIST" not in str(exc):
            raise
    return str(call(uri, "experiments/create", {"name": name})["experiment_id"])


def flat_params(data: dict[str, Any], prefix: str = "") -> dict[str, str]:
    """The job spec as MLflow params: nested keys joined with dots, lists and values as JSON text."""
    params: dict[str, str] = {}
    for key, value in data.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict) and value:
            params.update(flat_params(value, f"{name}."))
        else:
            params[name] = (value if isinstance(value, str) else json.dumps(value))[:PARAM_VALUE_MAX]
    return params


def spec_params(job: JobSpec) -> dict[str, str]:
    """The whole spec, defaults included (the values that ran, comparable across runs), unset fields left out."""
    return flat_params(job.model_dump(mode="json", by_alias=True, exclude_none=True))


def _log_batch(uri: str, run_id: str, params: dict[str, str], tags: dict[str, str]) -> None:
    items = [("params", k, v) for k, v in params.items()] + [("tags", k, v) for k, v in tags.items()]
    for start in range(0, len(items), BATCH):
        chunk = items[start : start + BATCH]
        body: dict[str, Any] = {"run_id": run_id, "params": [], "tags": []}
        for kind, key, value in chunk:
            body[kind].append({"key": key, "value": value})
        call(uri, "runs/log-batch", body)


def run_tags(uri: str, run_id: str) -> tuple[str, dict[str, str]]:
    """The run's status and its tags."""
    run = call(uri, "runs/get", query={"run_id": run_id})["run"]
    return run["info"]["status"], {t["key"]: t["value"] for t in run.get("data", {}).get("tags", [])}


def start(job: JobSpec, source: RunRef | None, group: str | None = None) -> TrackerRun | None:
    """The tracker run the job's processes log into: the source run's for `--resume-from` (its MLflow run's
    experiment read back), else a new one (MLflow: created now, RUNNING; W&B: an id); `group`: the sweep of a
    trial, W&B's run group."""
    tracking = job.tracking
    if tracking is None:
        return None
    mlflow = tracking.mlflow
    if source is not None and source.tracker_run_id:
        found = None
        if mlflow is not None:
            found = str(
                call(mlflow.tracking_uri, "runs/get", query={"run_id": source.tracker_run_id})["run"]["info"][
                    "experiment_id"
                ]
            )
        return TrackerRun(run_id=source.tracker_run_id, experiment_id=found, group=group)
    if mlflow is None:
        return TrackerRun(run_id=uuid.uuid4().hex, group=group)
    experiment = experiment_id(mlflow.tracking_uri, mlflow.experiment)
    body = {"experiment_id": experiment, "run_name": job.name, "start_time": int(time.time() * 1000)}
    created = call(mlflow.tracking_uri, "runs/create", body)["run"]["info"]
    return TrackerRun(run_id=created["run_id"], experiment_id=experiment, group=group)


def describe(job: JobSpec, run: RunRef, provenance: Provenance | None, came_from: Lineage | None) -> None:
    """The job's params (the new ones only, on a run joined again: MLflow params cannot change), its provenance
    and lineage as tags, and `trainctl.run`: the trainctl run that now owns the tracker run."""
    mlflow = job.tracking.mlflow if job.tracking is not None else None
    if mlflow is None or run.tracker_run_id is None:
        return
    uri, run_id = mlflow.tracking_uri, run.tracker_run_id
    existing = call(uri, "runs/get", query={"run_id": run_id})["run"].get("data", {})
    had = {p["key"]: p["value"] for p in existing.get("params", [])}
    params = {k: v for k, v in spec_params(job).items() if k not in had}
    tags = {f"{TAG}run": run.id, f"{TAG}target": run.target, f"{TAG}job": job.name}
    if run.sweep_id is not None:  # a sweep's trials: one filter in MLflow's UI (tags."trainctl.sweep" = '...')
        tags[f"{TAG}sweep"] = run.sweep_id
    if provenance is not None:
        for key, value in provenance.model_dump(mode="json").items():
            if value is not None:
                tags[f"{TAG}{key}"] = str(value)
    if came_from is not None:
        tags[f"{TAG}resumed_from"] = came_from.run
        tags[f"{TAG}resumed_from.target"] = came_from.target
        tags[f"{TAG}resumed_from.step"] = str(came_from.step)
        changed = {k: v for k, v in spec_params(job).items() if k in had and had[k] != v}
        if changed:
            tags[f"{TAG}resumed_from.changes"] = json.dumps(changed, sort_keys=True)[:PARAM_VALUE_MAX]
    _log_batch(uri, run_id, params, tags)


def settle(run: RunRef, succeeded: bool) -> None:
    """A run the engine says has ended: if it still owns its MLflow run and that run is still RUNNING (the job
    was killed before its launcher could say), mark it FINISHED or FAILED. Never raises: a status read must not
    fail because the tracker is away."""
    if run.tracker_uri is None or run.tracker_run_id is None:
        return
    try:
        status, tags = run_tags(run.tracker_uri, run.tracker_run_id)
        if status == "RUNNING" and tags.get(f"{TAG}run") == run.id:
            body = {"run_id": run.tracker_run_id, "status": "FINISHED" if succeeded else "FAILED"}
            call(run.tracker_uri, "runs/update", {**body, "end_time": int(time.time() * 1000)})
    except EngineError:
        pass


def abandon(uri: str, run_id: str) -> None:
    """A tracker run created for a submit that failed: FAILED, so it does not stay RUNNING (best effort)."""
    with contextlib.suppress(EngineError):
        call(uri, "runs/update", {"run_id": run_id, "status": "FAILED", "end_time": int(time.time() * 1000)})

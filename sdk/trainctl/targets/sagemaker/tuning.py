"""A `strategy: bayesian` sweep -> ONE CreateHyperParameterTuningJob request. Pure: no I/O, no boto3, no clock.

The trials' training job definition is the CreateTrainingJob request (request.build_request, the one builder)
moved into botocore's HyperParameterTrainingJobDefinition shape: what that shape has no member for is left
out and named in DROPPED, and a job that needs one of those is refused (exit 2) rather than run differently.
A swept field is tuned as the hyperparameter it becomes: each of its values (a range's two ends) is applied
to the job as `--set` would, checked, and rendered; the field must change exactly one hyperparameter and
nothing else in the request (SageMaker tunes hyperparameters only).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import datetime
from typing import Any

from ...errors import JobError
from ...runs.progress import METRIC_PATTERNS
from ...runs.provenance import ENV as PROVENANCE_ENV
from ...spec.job_spec import JobSpec
from ...spec.sweep import Scalar, SweepSpec, as_sets, parse_distribution
from ..base import Rendered, json_text
from . import container as ct
from . import groups
from .instances import lookup
from .request import (
    build_request,
    container_arguments,
    job_hash,
    section,
    timestamp,
    with_instance_defaults,
)

NAME_MAX = 32  # HyperParameterTuningJobName: 1-32 of [a-zA-Z0-9-] (botocore's sagemaker model)
DROPPED = {
    "TrainingJobName": "SageMaker names each training job of the search <tuning job>-<NNN>-<hex>",
    "Tags": "moved to the tuning job's Tags (the definition has none)",
    "CheckpointConfig": "the definition takes ONE prefix for every training job of the search, and a trial "
    "would sync in (and resume from) another trial's checkpoints; so trials keep theirs in the container only",
    "TensorBoardOutputConfig": "HyperParameterTrainingJobDefinition has no such member",
}
ALGORITHM_DROPPED = {
    "ContainerEntrypoint": "HyperParameterAlgorithmSpecification has no such member: SageMaker runs `IMAGE train`, "
    "which the launcher takes as `no PROGRAM: read the hyperparameters` (trainer/launch.py parse)",
    "ContainerArguments": "HyperParameterAlgorithmSpecification has no such member: the launcher runs with its defaults",
}
_SCALING = {"uniform": "Linear", "loguniform": "Logarithmic", "randint": "Linear"}
Check = Callable[[JobSpec], JobSpec]


def tuning_job_name(job: JobSpec, now: datetime | None = None, token: str = "") -> str:
    """`<job name>-<job hash>` (render) or `<job name>-<yymmddHHMMSS>-<token>` (submit), cut to 32 characters."""
    suffix = job_hash(job) if now is None else "-".join(p for p in (timestamp(now)[2:].replace("-", ""), token) if p)
    return f"{job.name[: NAME_MAX - len(suffix) - 1].rstrip('-')}-{suffix}"


def objective_metric(metric: str) -> str:
    """The sweep's metric as one of the request's MetricDefinitions (`val_accuracy` -> `validation:accuracy`,
    `loss` -> `train:loss`): SageMaker reads the objective from the job's log with that definition's regex."""
    name = f"validation:{metric.removeprefix('val_')}" if metric.startswith("val_") else f"train:{metric}"
    if name not in METRIC_PATTERNS:
        known = sorted(
            f"val_{m.split(':')[1]}" if m.startswith("validation:") else m.split(":")[1] for m in METRIC_PATTERNS
        )
        raise JobError([f"sweep.metric: {metric!r} is not one the training job reports to SageMaker; one of {known}"])
    return name


def _probes(spec: SweepSpec) -> dict[str, tuple[str, list[Scalar]]]:
    """{field: (kind, values to try)}: a grid's values and choice() are categorical, a range its two ends."""
    found: dict[str, tuple[str, list[Scalar]]] = {key: ("choice", list(values)) for key, values in spec.grid.items()}
    for key, text in spec.random.items():
        found[key] = parse_distribution(text)
    return found


def _without(request: dict[str, Any]) -> dict[str, Any]:
    """The request less what a tuned value may change: its hyperparameters and the provenance of the job as
    written (every trial of the search records the base job's: its values are in its hyperparameters)."""
    env = {k: v for k, v in request["Environment"].items() if k != PROVENANCE_ENV}
    return {k: v for k, v in request.items() if k not in ("HyperParameters", "Environment")} | {"Environment": env}


def parameter_ranges(job: JobSpec, spec: SweepSpec, name: str, check: Check) -> tuple[dict[str, Any], dict[str, str]]:
    """(ParameterRanges, {hyperparameter: field}); every value tried is checked by `check` (the preflight)."""
    base = build_request(job, name)
    was = base["HyperParameters"]
    problems: list[str] = []
    ranges: dict[str, list[dict[str, Any]]] = {}
    tuned: dict[str, str] = {}
    for field, (kind, values) in _probes(spec).items():
        sent: list[tuple[Scalar, dict[str, str]]] = []
        for value in values:
            try:
                request = build_request(check(job.with_overrides(as_sets({field: value}))), name)
            except JobError as exc:
                problems += [f"{field}={value}: {p}" for p in exc.problems]
                continue
            if _without(request) != _without(base):
                changed = sorted(k for k in {**request, **base} if request.get(k) != base.get(k))
                problems.append(f"{field}: SageMaker tunes hyperparameters only, and this field changes {changed}")
                continue
            sent.append((value, request["HyperParameters"]))
        keys = {k for _, hp in sent for k in {**hp, **was} if hp.get(k) != was.get(k)}
        if len(sent) < len(values):
            continue
        if len(keys) != 1:
            what = f"changes {sorted(keys)}" if keys else "changes no hyperparameter"
            problems.append(f"{field}: {what}; a tuned field must become exactly one hyperparameter")
            continue
        (key,) = keys
        tuned[key] = field
        # the text the job's own request would carry (JSON, as the SageMaker SDK's CategoricalParameter.as_json_range
        # encodes for framework images); a value at the trainer's default is left out of it, so encoded here
        texts = [hp.get(key, json.dumps(value)) for value, hp in sent]
        if kind == "choice":
            ranges.setdefault("CategoricalParameterRanges", []).append(
                {"Name": key, "Values": list(dict.fromkeys(texts))}
            )
        else:
            group = "IntegerParameterRanges" if kind == "randint" else "ContinuousParameterRanges"
            scaling = _SCALING[kind]
            ranges.setdefault(group, []).append(
                {"Name": key, "MinValue": texts[0], "MaxValue": texts[1], "ScalingType": scaling}
            )
    if problems:
        raise JobError(problems, "sweep")
    return ranges, tuned


def _launcher_problems(job: JobSpec) -> list[str]:
    """The launcher options a trial would lose (ALGORITHM_DROPPED): only the launcher's own defaults get through."""
    if ct.container(job) != "trainctl":
        return []
    job = with_instance_defaults(job)
    inst = lookup(groups.instance_type(job) or "")
    default = ["--nproc-per-node", str(max(inst.gpus, 1) if inst else job.resources.nprocs), "--max-restarts", "0"]
    given = container_arguments(job)
    if given == default:
        return []
    return [
        f"resources/launch/hang: the trials would run the launcher as `trainer-launch train` with its defaults "
        f"({' '.join(default)}), not {' '.join(given)}: a tuning job's HyperParameterAlgorithmSpecification has no "
        "ContainerArguments. Leave procs_per_node at the instance's GPUs, max_restarts 0, launch torchrun, no hang"
    ]


def _definition(request: dict[str, Any], static: dict[str, str]) -> dict[str, Any]:
    algorithm = {k: v for k, v in request["AlgorithmSpecification"].items() if k not in ALGORITHM_DROPPED}
    kept = {
        k: v for k, v in request.items() if k not in DROPPED and k not in ("AlgorithmSpecification", "HyperParameters")
    }
    return {"StaticHyperParameters": static, "AlgorithmSpecification": algorithm, **kept}


def tuning_request(job: JobSpec, spec: SweepSpec, name: str, check: Check) -> tuple[dict[str, Any], dict[str, str]]:
    """The CreateHyperParameterTuningJob request (the field names of boto3's create_hyper_parameter_tuning_job),
    and {tuned hyperparameter: the job field it sets}, to show each trial's values as the sweep's fields."""
    job = check(job)  # the base job as submit would take it (its code bundle packed), every value compared to it
    sec = section(job)
    problems = _launcher_problems(job)
    if sec.checkpoint_s3_uri:
        problems.append(f"sagemaker.checkpoint_s3_uri: {DROPPED['CheckpointConfig']}; leave it unset")
    if sec.tensorboard_s3_uri:
        problems.append(f"sagemaker.tensorboard_s3_uri: {DROPPED['TensorBoardOutputConfig']}; leave it unset")
    if problems:
        raise JobError(problems, "sweep")
    objective = {"Type": "Maximize" if spec.mode == "max" else "Minimize", "MetricName": objective_metric(spec.metric)}
    ranges, tuned = parameter_ranges(job, spec, name, check)
    request = build_request(job, name)
    static = {k: v for k, v in request["HyperParameters"].items() if k not in tuned}
    config: dict[str, Any] = {
        "Strategy": "Bayesian",
        "HyperParameterTuningJobObjective": objective,
        "ResourceLimits": {"MaxNumberOfTrainingJobs": spec.size, "MaxParallelTrainingJobs": spec.parallel},
        "ParameterRanges": ranges,
        # SageMaker's Auto early stopping is a median rule of its own (docs/sweeps.md): after_step/min_trials do not map
        "TrainingJobEarlyStoppingType": "Auto" if spec.early_stopping else "Off",
    }
    if spec.seed is not None:
        config["RandomSeed"] = spec.seed
    tuning = {
        "HyperParameterTuningJobName": name,
        "HyperParameterTuningJobConfig": config,
        "TrainingJobDefinition": _definition(request, static),
        "Tags": request["Tags"],
    }
    return tuning, tuned


def render(job: JobSpec, spec: SweepSpec, check: Check, *, now: datetime | None = None, token: str = "") -> Rendered:
    """The request as JSON; without `now` the name ends in the job's hash (deterministic)."""
    request, _ = tuning_request(job, spec, tuning_job_name(job, now, token), check)
    notes = [f"left out of the trials' definition: {key}: {why}" for key, why in DROPPED.items()]
    if spec.early_stopping is not None:
        notes.append(
            f"early_stopping: sent as TrainingJobEarlyStoppingType Auto, SageMaker's own median rule over epochs; "
            f"after_step {spec.early_stopping.after_step} and min_trials {spec.early_stopping.min_trials} have no "
            "counterpart in the request"
        )
    return Rendered(
        target="sagemaker",
        text=json_text(request),
        native=request,
        filename=f"{job.name}.create-hyper-parameter-tuning-job.json",
        notes=tuple(notes),
    )

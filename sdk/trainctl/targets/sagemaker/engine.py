"""The SageMaker target's engine: submit, watch, read logs and stop with boto3 (imported lazily).

`render.py` builds the request (pure); `submit(job, via="estimator")` goes through the SageMaker
SDK instead (estimator.py).
"""

from __future__ import annotations

import contextlib
import secrets
import sys
import time
from collections.abc import Iterator, Sequence
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any, Literal

from ...errors import EngineError, TrainctlError
from ...function import RESULTS
from ...runs import progress as progress_of
from ...runs.identity import uid_of
from ...runs.results import tar_files
from ...runs.state import Paths, RunRef, RunState, RunStatus
from ...spec.job_spec import JobSpec
from ...submit.bundle import prepare
from .aws_calls import aws_call, not_found, upload_source
from .data_upload import upload_inputs
from .handle import SageMakerHandle
from .quotas import check_quotas
from .render import validate
from .request import (
    build_request,
    checkpoint_uri,
    section,
    training_job_name,
    utc_now,
)

if TYPE_CHECKING:
    from pathlib import Path

    import boto3

    from ..transfer import Accept, Fetched

LOG_GROUP = "/aws/sagemaker/TrainingJobs"

# SageMaker's (status, secondary status) -> ours. Secondary statuses before the container runs are "queued".
_QUEUED_SECONDARY = frozenset(
    {"Starting", "Pending", "LaunchingMLInstances", "PreparingTrainingStack", "Downloading", "DownloadingTrainingImage"}
)
_FINAL = {"Completed": RunState.SUCCEEDED, "Failed": RunState.FAILED, "Stopped": RunState.CANCELLED}


def _session(region: str | None, boto_session: boto3.Session | None = None) -> boto3.Session:
    if boto_session is not None:
        return boto_session
    try:
        import boto3
    except ImportError as exc:  # pragma: no cover - the extra is part of dev installs
        raise EngineError("the SageMaker target needs boto3", hint="pip install 'trainctl[aws]'") from exc
    return boto3.Session(region_name=region)


def submit(
    job: JobSpec,
    *,
    via: Literal["direct", "sdk", "estimator", "model_trainer"] = "direct",
    now: datetime | None = None,
    boto_session: boto3.Session | None = None,
    local: bool = False,
) -> RunRef:
    """Create the training job (named `<job name>-<UTC timestamp>-<4 hex>`) and return its handle.

    via="direct" sends the rendered request with boto3; via="estimator" builds a
    `sagemaker.pytorch.PyTorch` estimator (SDK 2.x) from the same job and calls its `fit(wait=False)`;
    via="model_trainer" builds a `sagemaker.train.ModelTrainer` (SDK 3.x) and calls `train(wait=False)`;
    via="sdk" picks whichever of the two the installed SageMaker SDK has.
    local=True runs the same request as containers on this machine instead (local_engine.py).
    """
    job = prepare(job)  # its code bundle packed, if not yet (render reads it)
    if via not in ("direct", "sdk", "estimator", "model_trainer"):
        raise EngineError(f"via: got {via!r}; expected 'direct', 'sdk', 'estimator' or 'model_trainer'")
    if via == "sdk":
        via = installed_sdk()
    validate(job, local=local)
    sec = section(job)
    session = _session(sec.region, boto_session)
    # a random token beside the second: two submits of one job in the same second get two names
    name = training_job_name(job, now or utc_now(), token=secrets.token_hex(2))
    if local:
        from . import local_engine

        return local_engine.submit(job, name, session)
    check_quotas(job, session)  # before anything is uploaded: the account's quota per instance type
    # a path here becomes its content-addressed S3 prefix, uploaded once (local mode above reads the path)
    job = upload_inputs(job, session, say=lambda line: print(f"trainctl: {line}", file=sys.stderr))
    if via == "estimator":
        from .estimator import fit

        fit(job, name, session)
    elif via == "model_trainer":
        from .model_trainer import train

        name = train(job, session)
    else:
        request = build_request(job, name)
        upload_source(job, name, session)
        client = session.client("sagemaker")
        aws_call(f"create training job {name}", client.create_training_job, **request)
    handle = SageMakerHandle(region=session.region_name, via=via, log_group=LOG_GROUP)
    paths = Paths(checkpoint_dir=checkpoint_uri(job, name))
    return RunRef(
        target="sagemaker", native_id=name, job_name=job.name, run_uid=uid_of(job), paths=paths, handle=handle
    )


def installed_sdk() -> Literal["estimator", "model_trainer"]:
    """The bridge the installed SageMaker SDK has: ModelTrainer (3.x, package sagemaker-train) or the estimator (2.x)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        version("sagemaker-train")
        return "model_trainer"
    except PackageNotFoundError:
        pass
    try:
        return "estimator" if int(version("sagemaker").split(".")[0]) < 3 else "model_trainer"
    except PackageNotFoundError:
        raise EngineError(
            "via='sdk': no SageMaker Python SDK is installed", hint="pip install 'trainctl[sagemaker]'"
        ) from None


def _client(run: RunRef, service: str) -> Any:
    return _session(SageMakerHandle.of(run).region).client(service)


def describe(run: RunRef) -> dict[str, Any]:
    client = _client(run, "sagemaker")
    result: dict[str, Any] = aws_call(
        f"describe training job {run.native_id}", client.describe_training_job, TrainingJobName=run.native_id
    )
    return result


def fetch_checkpoints(run: RunRef, dest: Path, accept: Accept | None = None) -> Fetched:
    """`--resume-from` a SageMaker run: download its checkpoint prefix (recorded at submit, else the training
    job's CheckpointConfig.S3Uri) into `dest`, newest step-* first (targets/s3_checkpoints.py). A `local=true`
    run's are on this machine (local_engine.py)."""
    from ..s3_checkpoints import fetch
    from ..transfer import ResumeError

    uri = run.paths.checkpoint_dir or (describe(run).get("CheckpointConfig") or {}).get("S3Uri")
    if not uri:
        raise ResumeError(
            f"--resume-from {run.id}: the training job has no CheckpointConfig, so SageMaker kept no checkpoints "
            "(set sagemaker.checkpoint_s3_uri or sagemaker.output_s3_uri on the job that writes them)"
        )
    return fetch(str(uri), dest, accept, _session(SageMakerHandle.of(run).region).client("s3"))


def fetch_output(run: RunRef, dest: Path) -> Fetched:
    """`trainctl pull`: the trainer's output folder (/opt/ml/model on SageMaker: the final model, summary.json,
    metrics), unpacked from the job's model.tar.gz (a `local=true` run's: local_engine.py)."""
    from ..transfer import Fetched
    from .aws_calls import download_archive

    desc = describe(run)
    uri = (desc.get("ModelArtifacts") or {}).get("S3ModelArtifacts")
    if not uri:
        state = desc.get("TrainingJobStatus", "?")
        raise EngineError(f"{run.id} ({state}) has no model artifacts: SageMaker uploads them when training ends")
    download_archive(str(uri), dest, _session(SageMakerHandle.of(run).region))
    return Fetched(dest, str(uri))


def map_status(status: str, secondary: str) -> RunState:
    if status in _FINAL:
        return _FINAL[status]
    if status == "InProgress":
        return RunState.QUEUED if secondary in _QUEUED_SECONDARY else RunState.RUNNING
    if status == "Stopping":
        return RunState.RUNNING
    return RunState.UNKNOWN


def status(run: RunRef) -> RunStatus:
    """A training job's state on AWS (a `local=true` run's: local_engine.py, which `Target.engine_for` picks)."""
    try:
        desc = describe(run)
    except EngineError as exc:  # no such job: unknown, as SLURM's and Kubernetes' (a wrong id, if not recorded)
        if not_found(exc):
            return RunStatus(state=RunState.UNKNOWN, native_state="NotFound", reason=str(exc))
        raise
    native = str(desc.get("TrainingJobStatus", ""))
    secondary = str(desc.get("SecondaryStatus", ""))
    details = {
        key: str(desc[key])
        for key in ("SecondaryStatus", "BillableTimeInSeconds", "TrainingStartTime", "TrainingEndTime")
        if desc.get(key) is not None
    }
    artifacts = (desc.get("ModelArtifacts") or {}).get("S3ModelArtifacts")
    if artifacts:
        details["model_artifacts"] = str(artifacts)
    transitions = desc.get("SecondaryStatusTransitions") or []
    reason = str(desc.get("FailureReason") or (transitions[-1].get("StatusMessage", "") if transitions else ""))
    state = map_status(native, secondary)
    from .causes import attempts, failure_of

    # what the MetricDefinitions regexes (request.metric_definitions) found in the job's log, newest values
    metrics = {m["MetricName"]: m["Value"] for m in desc.get("FinalMetricDataList") or [] if "Value" in m}
    stamps = [m["Timestamp"] for m in desc.get("FinalMetricDataList") or [] if hasattr(m.get("Timestamp"), "timestamp")]
    return RunStatus(
        state=state,
        native_state=f"{native}/{secondary}" if secondary else native,
        reason=reason,
        progress=progress_of.from_metrics(metrics, max(stamps).timestamp() if stamps else None),
        details=details,
        attempts=attempts(run.native_id, state, str(desc.get("FailureReason") or ""), secondary),
        failure=failure_of(str(desc.get("FailureReason") or "")),
    )


def status_many(runs: Sequence[RunRef]) -> dict[str, RunStatus]:
    """Many runs' states in as few calls as the API allows (`trainctl list --refresh`): SageMaker has no
    describe for several jobs, but ListTrainingJobs pages hold each job's TrainingJobStatus and
    SecondaryStatus (botocore's sagemaker service model: TrainingJobSummary), so one listing per region,
    from the oldest run's creation on, answers for all; a job it does not list is described alone, and a
    `local=true` run is read from its folder."""
    from . import local_engine

    statuses: dict[str, RunStatus] = {}
    regions: dict[str | None, list[RunRef]] = {}
    for run in runs:
        if SageMakerHandle.of(run).local:
            with contextlib.suppress(TrainctlError):
                statuses[run.id] = local_engine.status(run)
        else:
            regions.setdefault(SageMakerHandle.of(run).region, []).append(run)
    for region, group in regions.items():
        listed = _listed(_session(region).client("sagemaker"), min(r.created_at for r in group) - 3600)
        for run in group:
            found = listed.get(run.native_id)
            with contextlib.suppress(TrainctlError):
                statuses[run.id] = _summary_status(found) if found is not None else status(run)
    return statuses


def _listed(client: Any, since: float) -> dict[str, dict[str, Any]]:
    """{training job name: its summary} of the jobs created after `since` (every page)."""
    found: dict[str, dict[str, Any]] = {}
    kwargs: dict[str, Any] = {"CreationTimeAfter": datetime.fromtimestamp(since, timezone.utc), "MaxResults": 100}
    while True:
        page = aws_call("list training jobs", client.list_training_jobs, **kwargs)
        found.update({s["TrainingJobName"]: s for s in page.get("TrainingJobSummaries", [])})
        if not page.get("NextToken"):
            return found
        kwargs["NextToken"] = page["NextToken"]


def _summary_status(summary: dict[str, Any]) -> RunStatus:
    native = str(summary.get("TrainingJobStatus", ""))
    secondary = str(summary.get("SecondaryStatus", "") or "")
    return RunStatus(state=map_status(native, secondary), native_state=f"{native}/{secondary}" if secondary else native)


def _streams(logs_client: Any, name: str) -> list[str]:
    found: list[str] = []
    kwargs: dict[str, Any] = {"logGroupName": LOG_GROUP, "logStreamNamePrefix": f"{name}/"}
    while True:
        try:
            page = logs_client.describe_log_streams(**kwargs)
        except logs_client.exceptions.ResourceNotFoundException:
            return []  # no log group yet: nothing has been written
        found += [s["logStreamName"] for s in page.get("logStreams", [])]
        if not page.get("nextToken"):
            return sorted(found)
        kwargs["nextToken"] = page["nextToken"]


def _new_events(logs_client: Any, stream: str, tokens: dict[str, str]) -> list[str]:
    """Events of `stream` after the last read (tracked in `tokens`), oldest first."""
    lines: list[str] = []
    while True:
        kwargs: dict[str, Any] = {"logGroupName": LOG_GROUP, "logStreamName": stream, "startFromHead": True}
        if stream in tokens:
            kwargs["nextToken"] = tokens[stream]
        page = aws_call(f"read log stream {stream}", logs_client.get_log_events, **kwargs)
        lines += [e["message"].rstrip("\n") for e in page.get("events", [])]
        token = page.get("nextForwardToken")
        if not token or token == tokens.get(stream):
            return lines
        tokens[stream] = token


def logs(run: RunRef, follow: bool = False, poll_s: float = 5.0) -> Iterator[str]:
    """Lines from CloudWatch Logs `/aws/sagemaker/TrainingJobs`, streams `<job>/algo-N-<time>`.

    With several nodes each line starts with its stream's host (`[algo-2] ...`). With follow, poll
    until the job has ended, then read once more so the last lines are not lost.
    """
    logs_client = _client(run, "logs")
    tokens: dict[str, str] = {}
    while True:
        finished = follow and status(run).state.finished
        streams = _streams(logs_client, run.native_id)
        for stream in streams:
            host = stream.split("/", 1)[1].rsplit("-", 1)[0] if "/" in stream else stream
            prefix = f"[{host}] " if len(streams) > 1 else ""
            for line in _new_events(logs_client, stream, tokens):
                yield prefix + line
        if not follow or finished:
            return
        time.sleep(poll_s)


def cancel(run: RunRef) -> None:
    """StopTrainingJob: SageMaker sends SIGTERM (the trainer checkpoints), then the job ends as Stopped."""
    client = _client(run, "sagemaker")
    aws_call(f"cancel {run.id}: StopTrainingJob", client.stop_training_job, TrainingJobName=run.native_id)


def function_results(run: RunRef) -> dict[str, bytes] | None:
    """A function job's results: in the model folders of a `local=true` run; on AWS inside model.tar.gz, the job's
    S3 output (ModelArtifacts), where SageMaker uploads /opt/ml/model (TRAINER_OUTPUT_DIR) when the job ends."""
    uri = str((describe(run).get("ModelArtifacts") or {}).get("S3ModelArtifacts") or "")
    if not uri.startswith("s3://"):
        return None
    bucket, _, key = uri.removeprefix("s3://").partition("/")
    try:
        body = aws_call(f"read {uri}", _client(run, "s3").get_object, Bucket=bucket, Key=key)["Body"].read()
    except TrainctlError:  # no model.tar.gz (the job ended before SageMaker uploaded one): no result
        return None
    return tar_files(body, under=f"{RESULTS}/")

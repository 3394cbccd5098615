"""A bayesian sweep on SageMaker: ONE HyperParameterTuningJob (tuning.py builds it, pure), created, read and
stopped with boto3. SageMaker picks each trial's values and runs its training jobs; trainctl reads them back
with ListTrainingJobsForHyperParameterTuningJob and stops the search with StopHyperParameterTuningJob (which
stops every training job of it that is still running, as SageMaker's API reference says of that call).

`Target.search_engine()` hands this module to the sweeps (sweeps/search.py); a search is recorded as
`{"name", "region", "fields"}`: the tuning job, its region, and {tuned hyperparameter: the job field}.
"""

from __future__ import annotations

import json
import secrets
import time
from collections.abc import Callable
from datetime import datetime
from typing import TYPE_CHECKING, Any

from ...errors import JobError
from ...runs.state import RunRef
from ...spec.job_spec import JobSpec
from ...spec.sweep import SweepSpec
from ...submit.bundle import prepare
from ..base import Rendered
from .aws_calls import aws_call, upload_source
from .data_upload import placeholders, upload_inputs
from .engine import LOG_GROUP, _session, map_status
from .handle import SageMakerHandle
from .quotas import check_quotas
from .request import section, utc_now
from .tuning import render as render_request
from .tuning import tuning_job_name, tuning_request

if TYPE_CHECKING:
    from .options import SageMakerOptions

Check = Callable[[JobSpec], JobSpec]
FINAL = {"Completed", "Failed", "Stopped"}  # HyperParameterTuningJobStatus values after which nothing runs


def _refused(options: SageMakerOptions) -> list[str]:
    problems = []
    if options.local:
        problems.append("local=true: local mode runs one training job's request here; a tuning job runs only on AWS")
    if options.via != "direct":
        problems.append(f"via={options.via}: a tuning job is sent by boto3 (via=direct); the SDKs' tuners are not used")
    return problems


def render(job: JobSpec, spec: SweepSpec, check: Check, options: SageMakerOptions) -> Rendered:
    if problems := _refused(options):
        raise JobError(problems, "sagemaker submit options")
    return render_request(placeholders(job)[0], spec, check)  # a local input: its prefix-to-be (data_upload.py)


def submit(job: JobSpec, spec: SweepSpec, check: Check, options: SageMakerOptions) -> dict[str, Any]:
    """Create the tuning job (its code tarball uploaded first, under the tuning job's name); the search record."""
    if problems := _refused(options):
        raise JobError(problems, "sagemaker submit options")
    job = prepare(job)
    session = _session(section(job).region, options.boto_session)
    name = tuning_job_name(job, options.now or utc_now(), token=secrets.token_hex(2))
    check_quotas(job, session, parallel=min(spec.parallel, spec.size))  # SageMaker counts the parallel trials
    job = upload_inputs(job, session)  # every trial reads the local inputs from their content-addressed prefix
    request, tuned = tuning_request(job, spec, name, check)
    upload_source(job, name, session)
    client = session.client("sagemaker")
    aws_call(f"create hyperparameter tuning job {name}", client.create_hyper_parameter_tuning_job, **request)
    return {"name": name, "region": session.region_name, "fields": tuned}


def _client(search: dict[str, Any]) -> Any:
    return _session(search.get("region")).client("sagemaker")


def describe(search: dict[str, Any]) -> dict[str, Any]:
    """DescribeHyperParameterTuningJob."""
    name = search["name"]
    found: dict[str, Any] = aws_call(
        f"describe hyperparameter tuning job {name}",
        _client(search).describe_hyper_parameter_tuning_job,
        HyperParameterTuningJobName=name,
    )
    return found


def finished(search: dict[str, Any]) -> bool:
    return str(describe(search).get("HyperParameterTuningJobStatus")) in FINAL


def trials(search: dict[str, Any], job_name: str = "") -> list[dict[str, Any]]:
    """Each training job of the search, oldest first: {run_id, params (as the sweep's fields), state, metric, note,
    ref (the training job as a run: status, logs and list work on it as on any)}, from
    ListTrainingJobsForHyperParameterTuningJob (every page)."""
    client, name = _client(search), search["name"]
    kwargs: dict[str, Any] = {"HyperParameterTuningJobName": name, "MaxResults": 100}
    summaries: list[dict[str, Any]] = []
    while True:
        page = aws_call(
            f"list the training jobs of tuning job {name}",
            client.list_training_jobs_for_hyper_parameter_tuning_job,
            **kwargs,
        )
        summaries += page.get("TrainingJobSummaries", [])
        if not page.get("NextToken"):
            break
        kwargs["NextToken"] = page["NextToken"]
    fields = search.get("fields") or {}
    out = []
    for summary in sorted(summaries, key=lambda s: (s.get("CreationTime") is None, str(s.get("CreationTime")))):
        tuned = summary.get("TunedHyperParameters") or {}
        objective = summary.get("FinalHyperParameterTuningJobObjectiveMetric") or {}
        state = map_status(str(summary.get("TrainingJobStatus", "")), "")
        created = summary.get("CreationTime")
        ref = RunRef(
            target="sagemaker",
            native_id=summary["TrainingJobName"],
            job_name=job_name,
            created_at=created.timestamp() if isinstance(created, datetime) else time.time(),
            handle=SageMakerHandle(region=search.get("region"), via="direct", log_group=LOG_GROUP),
        )  # no checkpoint prefix: the definition has no CheckpointConfig (tuning.DROPPED)
        out.append(
            {
                "run_id": f"sagemaker:{summary['TrainingJobName']}",
                "params": {fields.get(key, key): _decoded(text) for key, text in sorted(tuned.items())},
                "state": state.value,
                "metric": objective.get("Value"),
                "note": summary.get("FailureReason") or None,
                "ref": ref,
            }
        )
    return out


def _decoded(text: Any) -> Any:
    """A tuned value as SageMaker passed it (`"0.0031"`, a categorical's JSON text) back to its value."""
    try:
        return json.loads(text)
    except (TypeError, ValueError):
        return text


def stop(search: dict[str, Any]) -> None:
    """StopHyperParameterTuningJob: SageMaker stops the search and every training job of it still running."""
    name = search["name"]
    aws_call(
        f"stop hyperparameter tuning job {name}",
        _client(search).stop_hyper_parameter_tuning_job,
        HyperParameterTuningJobName=name,
    )

"""sdk_bridge: how a bridge reads the request, so that no field of it can be dropped or sent stale (pure)."""

from __future__ import annotations

import pytest
from trainctl.errors import EngineError, JobError
from trainctl.targets.sagemaker.sdk_bridge import RequestFields, check_run_fields

REQUEST = {
    "TrainingJobName": "job-1a2b3c4d",
    "ResourceConfig": {"InstanceType": "ml.g5.xlarge", "InstanceCount": 2},
    "StoppingCondition": {"MaxRuntimeInSeconds": 3600, "MaxPendingTimeInSeconds": 7200},
    "HyperParameters": {"epochs": "3", "sagemaker_program": '"train.py"'},
    "Tags": [{"Key": "k", "Value": "v"}],
    "Environment": {},
}


def test_a_field_no_argument_took_stops_the_bridge() -> None:
    fields = RequestFields(REQUEST, "test bridge")
    assert fields.take("ResourceConfig") == REQUEST["ResourceConfig"]  # a branch: every leaf below it
    assert fields.take_decoded("HyperParameters", "sagemaker_program") == "train.py"
    assert fields.take_rest("HyperParameters") == {"epochs": "3"}
    assert fields.take("RetryStrategy", "MaximumRetryAttempts") is None  # absent: nothing to carry
    fields.take("TrainingJobName")
    fields.take("StoppingCondition", "MaxRuntimeInSeconds")
    with pytest.raises(EngineError) as info:
        fields.finish()
    assert str(info.value).startswith(
        "the test bridge does not carry the request's StoppingCondition.MaxPendingTimeInSeconds, Tags, Environment"
    )


def test_a_field_the_sdk_cannot_carry_is_refused_naming_the_jobs_field() -> None:
    fields = RequestFields(REQUEST, "test bridge")
    for path in (("TrainingJobName",), ("ResourceConfig",), ("HyperParameters",), ("Tags",), ("Environment",)):
        fields.take(*path)
    fields.take("StoppingCondition", "MaxRuntimeInSeconds")
    cannot = {("StoppingCondition", "MaxPendingTimeInSeconds"): "sagemaker.max_pending_time"}
    with pytest.raises(JobError) as info:
        fields.finish(cannot)
    assert info.value.problems == ["sagemaker.max_pending_time: not something the test bridge builds; use via='direct'"]
    fields.take("StoppingCondition")
    fields.finish(cannot)


def test_a_field_that_names_the_run_must_be_taken_when_the_request_is_sent() -> None:
    """The object is built for the render name; a field other than those taken at send time that names the run
    (a per-run checkpoint prefix, say) would go out stale, so sending stops."""
    built = {**REQUEST, "CheckpointConfig": {"S3Uri": "s3://b/job-1a2b3c4d/"}}
    run = {
        **built,
        "TrainingJobName": "job-20261121-150000-ab12",
        "HyperParameters": {"epochs": "3", "sagemaker_job_name": '"job-20261121-150000-ab12"'},
    }
    at_send = (("TrainingJobName",), ("HyperParameters",))
    check_run_fields(built, run, at_send, "test bridge")
    stale = {**run, "CheckpointConfig": {"S3Uri": "s3://b/job-20261121-150000-ab12/"}}
    with pytest.raises(EngineError, match=r"^the test bridge set CheckpointConfig\.S3Uri when it was built"):
        check_run_fields(built, stale, at_send, "test bridge")

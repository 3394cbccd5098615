"""A sweep on SageMaker under the emulator (issue 26): 4 trials make 4 training jobs, each with its own
hyperparameters, and each request is one botocore's SageMaker model accepts (boto3 checks it before sending;
here it is checked again against the CreateTrainingJob input shape). moto completes a training job at once,
so "at most P at once" cannot be observed here; the driver's limit is the local target's (test_sweep_local)."""

from __future__ import annotations

from typing import Any

import boto3
import botocore.session
from botocore.validate import validate_parameters
from trainctl.job import Job
from trainctl.targets.lookup import get_target


def test_a_sweep_of_4_makes_4_training_jobs_whose_requests_botocore_accepts(spec: Any, aws: str) -> None:
    job = Job.parse(spec.job_data("swp"))
    sweep = job.sweep("sagemaker", grid={"trainer.lr": [0.001, 0.003], "trainer.batch_size": [32, 64]}, parallel=2)
    rows = sweep.wait(timeout=180, poll=0.5)
    assert [r.state for r in rows] == ["succeeded"] * 4, [(r.index, r.state, r.note) for r in rows]

    client = boto3.client("sagemaker", region_name=spec.REGION)
    shape = botocore.session.get_session().get_service_model("sagemaker").operation_model("CreateTrainingJob")
    names = sorted(r.run_id.removeprefix("sagemaker:") for r in rows if r.run_id)
    listed = {s["TrainingJobName"] for s in client.list_training_jobs(MaxResults=100)["TrainingJobSummaries"]}
    assert len(set(names)) == 4 and set(names) <= listed
    sent = []
    for row in rows:
        described = client.describe_training_job(TrainingJobName=(row.run_id or "").removeprefix("sagemaker:"))
        trial = job.with_overrides([f"{k}={v}" for k, v in row.params.items()])
        request = get_target("sagemaker").render(trial).native
        validate_parameters(request, shape.input_shape)  # raises ParamValidationError naming what is wrong
        assert described["HyperParameters"] == request["HyperParameters"]  # the trial's own values were sent
        sent.append(tuple(sorted(request["HyperParameters"].items())))
    assert len(set(sent)) == 4

"""A function on SageMaker: trainctl sends the training job to moto (the payload inside the `code` channel's
bundle, its digest and the submitting side's versions in the request's Environment); the image's `train` entry
point runs it as a host would (2 processes, DDP with gloo) and its /opt/ml/model is uploaded as SageMaker does, to
the job's ModelArtifacts; `run.results()` reads them back from S3. A version mismatch stops the host first."""

from __future__ import annotations

import dataclasses
import io
import json
import sys
import tarfile
from pathlib import Path
from typing import Any

import boto3
import cloudpickle
import pytest
from sagemaker_host import run_image  # the container's steps, minus the container (tests/support)
from trainctl import Job, Run
from trainctl.submit.bundle import prepare
from trainctl.targets.sagemaker import engine as target

cloudpickle.register_pickle_by_value(sys.modules[__name__])  # the test module does not travel: by value


def ddp_sum() -> dict[str, float]:
    import torch
    import torch.distributed as dist

    dist.init_process_group("gloo")
    total = torch.tensor([float(dist.get_rank() + 1)])
    dist.all_reduce(total)
    out = {"rank": dist.get_rank(), "world": dist.get_world_size(), "sum": total.item()}
    dist.destroy_process_group()
    return out


def _job(spec: Any) -> Job:
    sagemaker = spec.sagemaker_data(instance_type="ml.m5.xlarge")
    return Job(name="fn-sm", image=spec.IMAGE, resources={"procs_per_node": 2, "gpus_per_node": 0}, sagemaker=sagemaker)  # type: ignore[arg-type]


def _channel(capture: Any, spec: Any) -> tuple[dict[str, Any], bytes]:
    sent = capture.calls[-1][1] if capture.calls[-1][0] == "CreateTrainingJob" else capture.only("CreateTrainingJob")
    uri = json.loads(sent["HyperParameters"]["sagemaker_submit_directory"])
    body = capture.session.client("s3").get_object(Bucket=spec.BUCKET, Key=uri.split("/", 3)[3])["Body"].read()
    return sent, body


@pytest.mark.long  # the notebook test below covers the same path (the code channel, results from S3)
def test_a_function_runs_from_the_code_channel_and_its_values_come_back_from_s3(
    spec: Any, capture: Any, tmp_path: Path
) -> None:
    job = prepare(_job(spec).with_function(ddp_sum))
    assert job.function is not None
    run = Run.of(target.submit(job, boto_session=capture.session))
    sent, body = _channel(capture, spec)
    assert sent["Environment"]["TRAINER_FUNCTION_SHA256"] == job.function.sha256
    done = run_image(sent, tmp_path / "host", body)
    assert done.returncode == 0, done.stderr[-3000:]
    assert f"function payload sha256 {job.function.sha256} verified" in done.stderr

    model = io.BytesIO()  # SageMaker's upload of /opt/ml/model when the job ends: model.tar.gz at ModelArtifacts
    with tarfile.open(fileobj=model, mode="w:gz") as tar:
        tar.add(tmp_path / "host/opt/ml/model", arcname=".")
    uri = target.describe(run)["ModelArtifacts"]["S3ModelArtifacts"]
    bucket, _, key = uri.removeprefix("s3://").partition("/")
    boto3.client("s3").put_object(Bucket=bucket, Key=key, Body=model.getvalue())
    assert run.results(timeout=60) == [{"rank": r, "world": 2, "sum": 3.0} for r in (0, 1)]


def test_a_version_mismatch_stops_the_host_before_any_process(spec: Any, capture: Any, tmp_path: Path) -> None:
    job = _job(spec).with_function(ddp_sum)
    assert job.function is not None
    job = prepare(job._with_private("_function", dataclasses.replace(job.function, python="3.9")))
    target.submit(job, boto_session=capture.session)
    sent, body = _channel(capture, spec)
    done = run_image(sent, tmp_path / "host", body)
    assert done.returncode == 2, done.stderr[-3000:]
    assert "pickled by Python 3.9 with cloudpickle" in done.stderr and "but this image has Python 3." in done.stderr
    assert not (tmp_path / "host/opt/ml/model/function").exists()  # no rank started


def _host(run_id: str, root: Path) -> None:
    """What SageMaker does with a submitted job, minus the instance: the request as moto describes it, the
    code channel from S3, the image's `train` script, then /opt/ml/model uploaded to ModelArtifacts."""
    run = Run.from_id(run_id)
    sent = target.describe(run)
    # moto keeps no Environment (conftest.MOTO_GAPS): the one trainctl sent, from what the run recorded of it
    assert "Environment" not in sent and run.provenance is not None and run.provenance.function is not None
    shipped = run.provenance.function
    sent["Environment"] = {
        "TRAINER_CODE_SHA256": run.provenance.code_sha256, "TRAINER_FUNCTION_SHA256": shipped["sha256"],
        "TRAINER_FUNCTION_PYTHON": shipped["python"], "TRAINER_FUNCTION_CLOUDPICKLE": shipped["cloudpickle"],
    }  # fmt: skip
    uri = json.loads(sent["HyperParameters"]["sagemaker_submit_directory"])
    bucket, _, key = uri.removeprefix("s3://").partition("/")
    s3 = boto3.client("s3")
    body = s3.get_object(Bucket=bucket, Key=key)["Body"].read()
    run_image(sent, root, body)  # the raising function exits 1: its result is written all the same
    model = io.BytesIO()
    with tarfile.open(fileobj=model, mode="w:gz") as tar:
        tar.add(root / "opt/ml/model", arcname=".")
    bucket, _, key = sent["ModelArtifacts"]["S3ModelArtifacts"].removeprefix("s3://").partition("/")
    s3.put_object(Bucket=bucket, Key=key, Body=model.getvalue())


def test_the_notebook_function_runs_ddp_from_the_code_channel(spec: Any, aws: str, tmp_path: Path) -> None:
    """The notebook of tests/support/function_notebook.py, submitting to SageMaker (moto); between its submit
    cell and its results cell the test plays the host for each job (`_host`)."""
    notebook = pytest.importorskip("function_notebook")
    sagemaker = spec.sagemaker_data(instance_type="ml.m5.xlarge")
    fields = f"image={spec.IMAGE!r}, resources={{'procs_per_node': 2, 'gpus_per_node': 0}}, sagemaker={sagemaker!r}"

    def play_hosts(run_ids: list[str]) -> None:
        for index, run_id in enumerate(run_ids):
            _host(run_id, tmp_path / f"host-{index}")

    notebook.check_came_back(notebook.run_notebook(tmp_path, "sagemaker", fields, between=play_hosts))

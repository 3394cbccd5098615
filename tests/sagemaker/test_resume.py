"""`--resume-from` onto SageMaker, against the moto server (issue 18): a killed local digits run's newest
verified checkpoint lands under the job's checkpoint S3 prefix (what SageMaker syncs into
/opt/ml/checkpoints before the trainer starts), and the training job's CheckpointConfig names that prefix."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from trainctl import Job
from trainctl.resume import ResumeError

pytestmark = pytest.mark.slow


def test_resume_from_a_local_run_uploads_under_the_checkpoint_prefix(
    spec: Any, aws: str, tmp_path: Path, resume_helpers: Any
) -> None:
    import boto3

    data = tmp_path / "digits"
    subprocess.run([sys.executable, "-m", "trainer.examples.digits_data", str(data)], check=True, timeout=120)
    source = resume_helpers.killed_local_run(data)

    run = Job.parse(spec.job_data()).submit("sagemaker", resume_from=source.id)
    came = run.meta["resumed_from"]
    step_dir = f"step-{came['step']:08d}"
    prefix = f"output/digits/checkpoints/{step_dir}/"
    assert came["run"] == source.id and came["copied_to"] == f"s3://{spec.BUCKET}/{prefix}"

    s3 = boto3.Session(region_name=spec.REGION).client("s3")
    listed = s3.list_objects_v2(Bucket=spec.BUCKET, Prefix=prefix)
    keys = sorted(o["Key"].removeprefix(prefix) for o in listed.get("Contents", []))
    local = Path(came["checkpoint"])
    assert keys == sorted(p.relative_to(local).as_posix() for p in local.rglob("*") if p.is_file()), keys
    body = s3.get_object(Bucket=spec.BUCKET, Key=prefix + "state.pt")["Body"].read()
    assert body == (local / "state.pt").read_bytes()

    described = (
        boto3.Session(region_name=spec.REGION).client("sagemaker").describe_training_job(TrainingJobName=run.native_id)
    )
    assert described["CheckpointConfig"] == {
        "S3Uri": f"s3://{spec.BUCKET}/output/digits/checkpoints/",
        "LocalPath": "/opt/ml/checkpoints",
    }
    with pytest.raises(ResumeError, match="already holds checkpoints"):  # the same prefix again: refused
        Job.parse(spec.job_data()).submit("sagemaker", resume_from=source.id)

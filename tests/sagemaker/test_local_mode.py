"""trainctl's own SageMaker local mode (targets/sagemaker/local_hosts.py): the rendered request, run as
containers algo-1/algo-2 of the trainer image (the one every target runs) on a podman network, channels from moto's S3.
The oracle for the same image and job is test_sdk_local_mode.py (the SageMaker SDK's local mode)."""

from __future__ import annotations

import json
import tarfile
import time
from pathlib import Path
from typing import Any

import boto3
from trainctl.job import Job
from trainctl.targets.sagemaker.local_hosts import run_local
from trainctl.targets.sagemaker.render import render

REPO = Path(__file__).resolve().parents[2]


def _summary(*archives: Path) -> dict[str, Any] | None:
    for archive in archives:
        with tarfile.open(archive) as tar:
            for member in tar.getmembers():
                if member.name.endswith("summary.json"):
                    f = tar.extractfile(member)
                    assert f is not None
                    found: dict[str, Any] = json.loads(f.read())
                    return found
    return None


def test_local_mode_trains_digits_on_two_containers(spec: Any, aws: str, trainer_image: Any, tmp_path: Path) -> None:
    s3 = boto3.client("s3", endpoint_url=aws)
    for split in ("train", "val"):
        s3.upload_file(str(REPO / f"examples/data/digits/{split}.jsonl"), spec.BUCKET, f"digits/{split}/{split}.jsonl")
    job = Job.model_validate(
        spec.job_data(
            name="digits-trainctl-local",
            trainer={"model": "digits", "batch_size": 32, "epochs": 3, "lr": 0.01},
            resources={"nodes": 2, "gpus_per_node": 0, "procs_per_node": 1},
            sagemaker=spec.sagemaker_data(instance_type="ml.c5.xlarge"),
        )
    )
    request = render(job).native
    image = trainer_image.ref
    start = time.monotonic()
    result = run_local(request, image=image, root=tmp_path / "sm", s3=s3)
    took = time.monotonic() - start
    assert result.exit_codes == {"algo-1": 0, "algo-2": 0}, result.logs
    assert result.failure is None
    summary = _summary(result.output_tar, result.model_tar)
    print(f"trainctl local mode: {image} id {trainer_image.id}, {took:.0f}s, summary {summary}")
    assert summary is not None, result.logs
    assert summary["world_size"] == 2 and summary["params_in_sync"] is True, summary
    assert summary["val_accuracy"] > 0.9, summary
    assert str(summary["checkpoint"]).startswith("/opt/ml/checkpoints/"), summary
    from trainctl.runs.provenance import provenance

    assert summary["provenance"] == provenance(job, None).model_dump(), (
        "the request's TRAINCTL_PROVENANCE reached summary.json"
    )


def test_local_mode_refuses_an_image_that_is_not_there(spec: Any, aws: str, tmp_path: Path) -> None:
    import pytest
    from trainctl.errors import EngineError

    request = render(Job.model_validate(spec.job_data())).native
    with pytest.raises(EngineError, match="not in podman's local store"):
        run_local(request, image="localhost/trainctl-no-such-image:0", root=tmp_path / "sm")
    assert not (tmp_path / "sm").exists()  # nothing fetched, nothing started

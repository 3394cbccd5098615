"""SDK 3.x: `job.to_model_trainer()` builds a real `sagemaker.train.ModelTrainer` (in `.venv-sm3`, made by
scripts/setup.sh: SDK 3 cannot share the main venv with SDK 2), and its `train()` sends the direct request.

The SDK runs in a subprocess against this session's moto server on 127.0.0.1, with TelemetryOptOut in its
session config and a socket guard that refuses and records any other address (tests/sagemaker/sm3_driver.py).
"""

from __future__ import annotations

import json
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pytest
from trainctl.errors import JobError
from trainctl.job import Job
from trainctl.submit.bundle import prepare
from trainctl.targets.sagemaker import engine

REPO = Path(__file__).resolve().parents[2]
NOW = datetime(2026, 11, 21, 14, 0, 0, tzinfo=timezone.utc)


def _comparable(request: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = json.loads(json.dumps(request).replace(request["TrainingJobName"], "<NAME>"))
    return out


def test_to_model_trainer_under_sdk3_sends_the_direct_request(spec: Any, capture: Any, tmp_path: Path) -> None:
    """Issue 14.10: SDK 3.x has no Estimator; ModelTrainer runs trainctl's launcher with the same request."""
    src = tmp_path / "src"
    src.mkdir()
    (src / "train.py").write_text("print('hi')\n")
    data = spec.job_data(
        "sdk3",
        trainer=None,
        command=["python", "train.py", "--epochs", "3"],
        resources={"nodes": 2},
        retries=2,
        secrets=[{"env": "TOKEN", "name": "prod/token"}],
        sagemaker=spec.sagemaker_data(
            instance_type="ml.p4d.24xlarge",
            source_dir=str(src),
            subnets=["subnet-1"],
            security_group_ids=["sg-1"],
            tags={"team": "ml"},
            keep_alive_period="30m",
            tensorboard_s3_uri=f"s3://{spec.BUCKET}/tb/",
        ),
    )
    direct_run = engine.submit(prepare(Job.parse(data)), now=NOW, boto_session=capture.session)
    direct = capture.only("CreateTrainingJob")

    built = spec.run_sdk3(data, tmp_path, "build")
    assert built["class_mro"][:2] == ["TrainctlModelTrainer", "ModelTrainer"]
    assert built["sdk"].startswith("1.") and built["module"] == "sagemaker.train.model_trainer"
    assert built["source_code"] is None and built["distributed"] is None  # not the SDK's own torchrun driver
    assert built["installed"] == "model_trainer"  # submit(via="sdk") there takes ModelTrainer

    sent = spec.run_sdk3(data, tmp_path, "submit")
    request = sent["request"]
    assert request["TrainingJobName"].startswith("sdk3-") and request["TrainingJobName"] != direct_run.native_id
    assert request["AlgorithmSpecification"]["ContainerEntrypoint"] == ["train"]
    assert request["AlgorithmSpecification"]["ContainerArguments"][:2] == ["--nproc-per-node", "8"]
    # SDK 3 always names the output compression; GZIP is also what SageMaker does when it is left out
    assert request["OutputDataConfig"].pop("CompressionType") == "GZIP"
    assert _comparable(request) == _comparable(direct)
    code = json.loads(request["HyperParameters"]["sagemaker_submit_directory"])
    assert sent["uploaded"] == code  # the tarball the launcher unpacks is where the request says


def test_submit_via_sdk_picks_the_installed_bridge(spec: Any, capture: Any) -> None:
    """The main venv has SDK 2.x: via='sdk' is the estimator there (the .venv-sm3 run above is ModelTrainer)."""
    assert engine.installed_sdk() == "estimator"
    run = engine.submit(prepare(Job.parse(spec.job_data("pick"))), via="sdk", now=NOW, boto_session=capture.session)
    assert run.handle.via == "estimator"
    assert json.loads(capture.only("CreateTrainingJob")["HyperParameters"]["sagemaker_program"]) == "sagemaker_entry.py"


def test_local_container_mode_refuses_instance_groups_before_needing_the_sdk(spec: Any) -> None:
    """SDK 3's `_LocalContainer` runs one instance type: instance groups are invalid input (exit 2), said first."""
    groups = [{"name": "train", "instance_type": "ml.g5.xlarge", "count": 2, "train": True}]
    job = prepare(
        Job.parse(spec.job_data("hetero", sagemaker=spec.sagemaker_data(instance_type=None, instance_groups=groups)))
    )
    with pytest.raises(JobError, match=r"sagemaker\.instance_groups: .*local container mode runs one instance type"):
        job.to_model_trainer(training_mode="LOCAL_CONTAINER")

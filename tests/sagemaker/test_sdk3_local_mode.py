"""The oracle under SDK 3: the SageMaker Python SDK 3's own local container mode runs trainctl's image.

`Job.to_model_trainer(training_mode=Mode.LOCAL_CONTAINER)` in `.venv-sm3` (sm3_driver.py `local`): AWS's
code (sagemaker/train/local/local_container.py, `_LocalContainer.train`) downloads the channels from S3
(moto here), writes each host's /opt/ml/input/config (resourceconfig.json, hyperparameters.json,
inputdataconfig.json) and a compose file of `algo-1`/`algo-2` on the `sagemaker-local` network with the
request's entry point and arguments, runs it with docker compose (`_get_compose_cmd_prefix`: `docker compose`
v2 where the docker client has it, else Debian's `docker-compose` 1.x, as here) against podman's
Docker-compatible socket, and packs /opt/ml/model and /opt/ml/output into model.tar.gz and output.tar.gz.
The one trainer image every target runs: it starts as root and its launcher drops to uid 10001. Both
code paths: the trainer job (no code) and a `code:` job, whose bundle the bridge uploads and the SDK
downloads as the `code` channel (model_trainer.py `_channel`: SDK 3 local mode loses a single-object
channel, aws/sagemaker-python-sdk#5033, so locally that channel names the bundle's folder).
Telemetry is off (the session's config) and the driver's socket guard refuses anything but 127.0.0.1.
"""

from __future__ import annotations

import json
import secrets
from pathlib import Path
from typing import Any

import boto3
import pytest
from trainctl.job import Job
from trainctl.submit.bundle import prepare
from trainctl.targets.sagemaker.render import render

pytestmark = pytest.mark.slow  # SageMaker SDK 3 local mode: containers, 90-150 s a test in CI

REPO = Path(__file__).resolve().parents[2]


def _train_locally(spec: Any, job: dict[str, Any], image: Any, docker_host: str, tmp_path: Path) -> dict[str, Any]:
    """sm3_driver.py `local`: the job's ModelTrainer in LOCAL_CONTAINER mode, trained with wait, 2 instances."""
    # docker-compose names its project (and so the containers) after this folder: unique per call, so two
    # checkouts' test sessions on one machine never recreate each other's algo-N containers
    root = tmp_path / f"sm3root{secrets.token_hex(3)}"
    root.mkdir()
    # the job names the ECR image a real request needs; local mode runs the local tag
    result: dict[str, Any] = spec.run_sdk3(
        job, tmp_path, "local", image.ref, str(root), DOCKER_HOST=docker_host, TMPDIR=str(tmp_path)
    )
    print(json.dumps(result))
    assert result["class_mro"][:2] == ["TrainctlModelTrainer", "ModelTrainer"]
    assert result["instance_type"] == "local" and result["checkpoint_config"] is None
    assert result["services"] == {"algo-1": image.ref, "algo-2": image.ref}
    ran = {found.removeprefix("sha256:") for found in result["containers"].values()}
    assert len(result["containers"]) == 2 and ran == {image.id}  # the one image every target runs
    return result


def test_sdk3_local_container_mode_trains_digits_on_two_instances(
    spec: Any, aws: str, trainer_image: Any, docker_host: str, tmp_path: Path
) -> None:
    s3 = boto3.client("s3", endpoint_url=aws)
    for split in ("train", "val"):
        s3.upload_file(str(REPO / f"examples/data/digits/{split}.jsonl"), spec.BUCKET, f"digits/{split}/{split}.jsonl")
    job = spec.job_data(
        name="digits-sdk3-local",
        trainer={"model": "digits", "batch_size": 32, "epochs": 3, "lr": 0.01},
        resources={"nodes": 2, "gpus_per_node": 0, "procs_per_node": 1},
        sagemaker=spec.sagemaker_data(instance_type="ml.c5.xlarge"),
    )
    result = _train_locally(spec, job, trainer_image, docker_host, tmp_path)
    summary = next((v for k, v in result["archived"].items() if k.endswith("summary.json")), None)
    assert summary is not None, f"no summary.json in the SDK's model/output archives: {list(result['archived'])}"
    assert summary["world_size"] == 2, summary
    assert summary["val_accuracy"] > 0.9, summary
    assert summary["params_in_sync"] is True, summary


def test_sdk3_local_container_mode_runs_a_code_job_from_the_code_channel(
    spec: Any, aws: str, trainer_image: Any, docker_host: str, tmp_path: Path
) -> None:
    """A `code:` job: the bridge uploads the bundle to moto's S3 and SDK 3 brings it in as the `code` channel."""
    job = spec.job_data(
        name="code-sdk3-local",
        trainer=None,
        command=["python", "train.py", "--steps", "20"],
        code={"dir": str(REPO / "examples/code-job/src")},
        data={},
        resources={"nodes": 2, "gpus_per_node": 0, "procs_per_node": 1},
        sagemaker=spec.sagemaker_data(instance_type="ml.c5.xlarge"),
    )
    sha256 = render(prepare(Job.model_validate(job))).native["Environment"]["TRAINER_CODE_SHA256"]
    result = _train_locally(spec, job, trainer_image, docker_host, tmp_path)
    found = result["archived"].get("model.tar.gz:result.json")
    assert found is not None, f"no result.json in the SDK's model archive: {list(result['archived'])}"
    assert found["world_size"] == 2 and found["greeting"] == "hello from helper.py", found
    assert found["code_sha256"] == sha256, found  # the bundle the launcher checked and unpacked

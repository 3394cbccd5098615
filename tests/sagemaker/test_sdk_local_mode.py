"""The oracle for the image on SageMaker: the SageMaker Python SDK's own local mode runs trainctl's image.

`Job.to_estimator()` with `instance_type="local"` and a `LocalSession`: AWS's code (sagemaker/local/image.py,
`_SageMakerContainer.train` and `_create_docker_host`) writes /opt/ml (resourceconfig.json,
hyperparameters.json, inputdataconfig.json, the channels fetched from S3 — moto here) and starts
`algo-1`/`algo-2` with docker-compose on the `sagemaker-local` network; the engine is podman behind
`podman system service`'s Docker-compatible socket (DOCKER_HOST). It runs the one trainer image every
target runs: it starts as root (the SDK cannot pass a user and its folders are root's, mode 0700) and
its launcher hands /opt/ml to uid 10001 and drops to it (tests/image/test_root_drop.py checks the drop).
Both ways the SDK ships code: `local_code` (its default: the source folder mounted at /opt/ml/code,
`sagemaker_submit_directory` naming it) and uploaded to S3 (`local_code: False`, the code channel).
Telemetry is off (the estimator's session config) and the socket guard refuses anything but 127.0.0.1.
"""

from __future__ import annotations

import json
import subprocess
import tarfile
import time
from pathlib import Path
from typing import Any

import pytest
from trainctl.job import Job

pytestmark = pytest.mark.slow  # the SageMaker SDK's local mode: containers, 40-50 s a test in CI
REPO = Path(__file__).resolve().parents[2]


def _upload_digits(aws: str, bucket: str) -> None:
    import boto3

    s3 = boto3.client("s3", endpoint_url=aws)
    for split in ("train", "val"):
        s3.upload_file(str(REPO / f"examples/data/digits/{split}.jsonl"), bucket, f"digits/{split}/{split}.jsonl")


def _summary_from_s3(aws: str, model_data: str, tmp_path: Path) -> tuple[dict[str, Any] | None, list[str]]:
    """summary.json from the archives the SDK uploaded next to model.tar.gz (model or output)."""
    import boto3

    s3 = boto3.client("s3", endpoint_url=aws)
    bucket, key = model_data.removeprefix("s3://").split("/", 1)
    prefix = key.rsplit("/", 1)[0]
    names: list[str] = []
    for obj in s3.list_objects_v2(Bucket=bucket, Prefix=prefix).get("Contents", []):
        if not obj["Key"].endswith(".tar.gz"):
            continue
        local = tmp_path / Path(obj["Key"]).name
        s3.download_file(bucket, obj["Key"], str(local))
        with tarfile.open(local) as tar:
            for member in tar.getmembers():
                names.append(f"{obj['Key']}:{member.name}")
                if member.name.endswith("summary.json"):
                    f = tar.extractfile(member)
                    assert f is not None
                    return json.loads(f.read()), names
    return None, names


def _job(spec: Any, image: str) -> Job:
    data = spec.job_data(
        name="digits-sdk-local",
        image=image,
        trainer={"model": "digits", "batch_size": 32, "epochs": 3, "lr": 0.01},
        resources={"nodes": 2, "gpus_per_node": 0, "procs_per_node": 1},
        sagemaker=spec.sagemaker_data(instance_type="ml.c5.xlarge"),
    )
    return Job.model_validate(data)


@pytest.mark.parametrize("local_code", [True, False], ids=["local-code", "code-in-s3"])
def test_sdk_local_mode_trains_digits_on_two_instances(
    spec: Any,
    aws: str,
    trainer_image: Any,
    docker_host: str,
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    local_code: bool,
) -> None:
    import boto3
    from sagemaker.local import LocalSession
    from trainctl.targets.sagemaker.sdk_bridge import TELEMETRY_OFF

    monkeypatch.setenv("DOCKER_HOST", docker_host)
    monkeypatch.setenv("TMPDIR", str(tmp_path))  # the SDK's /opt/ml folders, removed with the test
    _upload_digits(aws, spec.BUCKET)
    image = trainer_image.ref
    job = _job(spec, spec.IMAGE)  # the ECR name a real request needs; local mode runs the local tag
    session = LocalSession(
        boto_session=boto3.Session(region_name=spec.REGION),
        s3_endpoint_url=aws,
        default_bucket=spec.BUCKET,
        sagemaker_config=TELEMETRY_OFF,
    )
    session.config = {"local": {"local_code": local_code, "container_root": str(tmp_path)}}
    estimator = job.to_estimator(instance_type="local", image_uri=image, sagemaker_session=session)
    start = time.monotonic()
    estimator.fit(wait=True, logs=True)
    took = time.monotonic() - start

    summary, names = _summary_from_s3(aws, estimator.model_data, tmp_path)
    assert summary is not None, f"no summary.json in the job's model/output archives: {names}"
    ran = subprocess.run(
        ["podman", "image", "inspect", image, "--format", "{{.Id}}"], capture_output=True, text=True, check=True
    ).stdout.strip()
    print(f"SDK local mode (local_code={local_code}): {image} id {ran}, {took:.0f}s, summary {summary}")
    assert ran == trainer_image.id  # the one image every target runs
    assert summary["world_size"] == 2, summary
    assert summary["val_accuracy"] > 0.9, summary
    assert summary["params_in_sync"] is True, summary


def test_sdk_local_mode_runs_a_code_job_whose_bundle_the_launcher_verifies(
    spec: Any, aws: str, trainer_image: Any, docker_host: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
    capfd: pytest.CaptureFixture[str],
) -> None:  # fmt: skip
    """A `code:` job through the estimator, code in S3 (`local_code: False`): the SDK's local mode downloads the
    code channel, and the launcher checks its sha256 against TRAINER_CODE_SHA256 before anything runs. With the
    SDK's own tarball of the folder (before fit() uploaded trainctl's bundle) that check failed, exit 2 ("code
    bundle ... has sha256 ..., but the job was rendered with ..."), which the SDK's local mode does not raise:
    the containers' output (docker-compose's, on this process's stdout) says which."""
    import boto3
    from sagemaker.local import LocalSession
    from trainctl.targets.sagemaker.sdk_bridge import TELEMETRY_OFF

    monkeypatch.setenv("DOCKER_HOST", docker_host)
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "hello.py").write_text("import os\nprint('hello from rank', os.environ['RANK'])\n")
    data = spec.job_data(
        name="code-sdk-local", image=spec.IMAGE, trainer=None, command=["python", "hello.py"],
        code=str(tmp_path / "src"), resources={"nodes": 1, "gpus_per_node": 0, "procs_per_node": 1},
        sagemaker=spec.sagemaker_data(instance_type="ml.c5.xlarge"),
    )  # fmt: skip
    session = LocalSession(
        boto_session=boto3.Session(region_name=spec.REGION), s3_endpoint_url=aws, default_bucket=spec.BUCKET,
        sagemaker_config=TELEMETRY_OFF,
    )  # fmt: skip
    session.config = {"local": {"local_code": False, "container_root": str(tmp_path)}}
    job = Job.model_validate(data)
    estimator = job.to_estimator(instance_type="local", image_uri=trainer_image.ref, sagemaker_session=session)
    estimator.fit(wait=True, logs=True)
    out = capfd.readouterr().out
    assert "hello from rank 0" in out and "trainer-launch: error" not in out, out[-3000:]

"""The estimator bridge against moto: the SDK's request agrees with the direct one, with no STS/telemetry calls.

The socket guard (conftest.py) fails any test here whose code resolves or connects anywhere but
127.0.0.1, which is what proves the SDK made no STS, IAM or telemetry call.
"""

from __future__ import annotations

import hashlib
import io
import json
import tarfile
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest
from trainctl.job import Job
from trainctl.submit.bundle import prepare
from trainctl.targets.sagemaker import engine as target
from trainctl.targets.sagemaker.estimator import to_estimator
from trainctl.targets.sagemaker.render import render

sagemaker = pytest.importorskip("sagemaker.pytorch", reason="the estimator bridge needs trainctl[sagemaker]")

NOW = datetime(2026, 11, 21, 13, 0, 0, tzinfo=timezone.utc)
# SDK 2.x's script-mode keys (sagemaker/estimator.py Framework._script_mode_hyperparam_update)
SDK_ONLY_HYPERPARAMETERS = (
    "sagemaker_program",
    "sagemaker_submit_directory",
    "sagemaker_job_name",
    "sagemaker_region",
    "sagemaker_container_log_level",
)


def _comparable(request: dict[str, Any], drop_code: bool) -> dict[str, Any]:
    """The request minus what only names the run or is SDK bookkeeping (see sagemaker_estimator's docstring)."""
    out = json.loads(json.dumps(request).replace(request["TrainingJobName"], "<NAME>"))
    out["HyperParameters"] = {
        k: v for k, v in out["HyperParameters"].items() if not (drop_code and k in SDK_ONLY_HYPERPARAMETERS)
    }
    for key in ("sagemaker_job_name", "sagemaker_region", "sagemaker_container_log_level"):
        out["HyperParameters"].pop(key, None)
    if drop_code:
        out["InputDataConfig"] = [c for c in out.get("InputDataConfig", []) if c["ChannelName"] != "code"]
    out.setdefault("EnableManagedSpotTraining", False)  # the SDK leaves out the false default
    out.pop("ProfilerConfig", None)  # the bridge turns the SDK's profiler off; the direct request has none
    return out


def _both(job: Job, capture: Any) -> tuple[dict[str, Any], dict[str, Any]]:
    target.submit(job, now=NOW, boto_session=capture.session)
    target.submit(job, via="estimator", now=NOW + timedelta(seconds=1), boto_session=capture.session)
    sent = [p for op, p in capture.calls if op == "CreateTrainingJob"]
    assert len(sent) == 2
    return sent[0], sent[1]


def test_trainer_job_requests_agree(spec: Any, capture: Any) -> None:
    job = prepare(
        Job.from_yaml(spec.REPO / "examples/digits-sagemaker.yaml").with_overrides(
            [
                "name=bridge-trainer",
                f"sagemaker.output_s3_uri=s3://{spec.BUCKET}/output/",
                "sagemaker.subnets=[subnet-1]",
                "sagemaker.security_group_ids=[sg-1]",
            ]
        )
    )
    direct, via_sdk = _both(job, capture)
    assert _comparable(via_sdk, drop_code=True) == _comparable(direct, drop_code=False)
    # What the SDK adds: its entry point shim, which runs trainer.train, shipped in the code channel.
    hp = via_sdk["HyperParameters"]
    assert json.loads(hp["sagemaker_program"]) == "sagemaker_entry.py"
    code = json.loads(hp["sagemaker_submit_directory"])
    assert code == f"s3://{spec.BUCKET}/output/{via_sdk['TrainingJobName']}/source/sourcedir.tar.gz"
    assert via_sdk["InputDataConfig"][-1] == {
        "ChannelName": "code",
        "DataSource": {
            "S3DataSource": {"S3DataType": "S3Prefix", "S3Uri": code, "S3DataDistributionType": "FullyReplicated"}
        },
    }
    body = capture.session.client("s3").get_object(Bucket=spec.BUCKET, Key=code.split("/", 3)[3])["Body"].read()
    with tarfile.open(fileobj=io.BytesIO(body)) as tar:
        shim = tar.extractfile("sagemaker_entry.py")
        assert shim is not None and b'run_module("trainer.train"' in shim.read()


def test_source_dir_requests_agree(spec: Any, capture: Any, tmp_path: Path) -> None:
    src = tmp_path / "src"
    (src / "pkg").mkdir(parents=True)
    (src / "train.py").write_text("print('hi')\n")
    (src / "pkg" / "__init__.py").write_text("")
    data = spec.job_data(
        "bridge-code",
        trainer=None,
        command=["python", "train.py", "--epochs", "3"],
        spot=True,
        retries=2,
        env={"A": "1"},
        secrets=[{"env": "TOKEN", "name": "arn:aws:secretsmanager:us-east-1:123456789012:secret:tok"}],
        sagemaker=spec.sagemaker_data(source_dir=str(src), max_wait="3h", tags={"team": "ml"}),
    )
    direct, via_sdk = _both(prepare(Job.parse(data)), capture)
    # Same code layout (<code prefix>/<training job name>/source/sourcedir.tar.gz), so nothing is dropped.
    assert _comparable(via_sdk, drop_code=False) == _comparable(direct, drop_code=False)
    code = json.loads(via_sdk["HyperParameters"]["sagemaker_submit_directory"])
    body = capture.session.client("s3").get_object(Bucket=spec.BUCKET, Key=code.split("/", 3)[3])["Body"].read()
    with tarfile.open(fileobj=io.BytesIO(body)) as tar:
        assert {"train.py", "pkg/__init__.py"} <= set(tar.getnames())
    # The launcher refuses a code tarball whose sha256 is not TRAINER_CODE_SHA256 (docs/contracts.md): the one
    # the SDK leaves in S3 must be trainctl's verified bundle, byte for byte, not a tarball of the SDK's own.
    assert hashlib.sha256(body).hexdigest() == via_sdk["Environment"]["TRAINER_CODE_SHA256"]


def test_command_job_requests_agree(spec: Any, capture: Any) -> None:
    data = spec.job_data("bridge-cmd", trainer=None, command=["python", "-m", "mypkg.train", "--x", "1"])
    direct, via_sdk = _both(prepare(Job.parse(data)), capture)
    assert _comparable(via_sdk, drop_code=True) == _comparable(direct, drop_code=False)
    assert json.loads(via_sdk["HyperParameters"]["trainctl_command"]) == ["python", "-m", "mypkg.train", "--x", "1"]


def test_pytorchddp_hyperparameters_are_the_sdks(spec: Any, aws: str, tmp_path: Path) -> None:
    """Our pytorchddp keys are exactly what SDK 2.x's PyTorch estimator computes for the same job."""
    (tmp_path / "train.py").write_text("print('hi')\n")
    data = spec.job_data(
        "bridge-ddp",
        image="763104351884.dkr.ecr.us-east-1.amazonaws.com/pytorch-training:2.3.0-gpu-py311-cu121-ubuntu20.04-sagemaker",
        trainer=None,
        command=["python", "train.py", "--epochs", "3"],
        resources={"nodes": 2, "gpus_per_node": 8},
        sagemaker=spec.sagemaker_data(
            instance_type="ml.p4d.24xlarge", distribution="pytorchddp", source_dir=str(tmp_path)
        ),
    )
    job = prepare(Job.parse(data))
    est = to_estimator(job)
    assert isinstance(est, sagemaker.PyTorch)
    sdk_hp = est.hyperparameters()
    ours = render(job).native["HyperParameters"]
    for key in (
        "sagemaker_distributed_dataparallel_enabled",
        "sagemaker_distributed_dataparallel_custom_mpi_options",
        "sagemaker_instance_type",
    ):
        assert sdk_hp[key] == ours[key], key
    assert "sagemaker_torch_distributed_enabled" not in sdk_hp


def test_notebook_fit_without_arguments(spec: Any, capture: Any) -> None:
    """`job.to_estimator().fit(wait=False)`: the estimator adds the data and code channels itself."""
    job = prepare(Job.parse(spec.job_data("bridge-fit")))
    est = job.to_estimator(boto_session=capture.session)
    est.fit(wait=False, logs=False)
    sent = capture.only("CreateTrainingJob")
    assert sent["TrainingJobName"].startswith("bridge-fit-")
    assert [c["ChannelName"] for c in sent["InputDataConfig"]] == ["train", "val", "code"]
    assert not [op for op, _ in capture.calls if op in ("GetCallerIdentity", "GetRole")]


def test_bad_job_fails_before_the_sdk(spec: Any, aws: str) -> None:
    from trainctl.errors import JobError

    job = prepare(Job.parse(spec.job_data("bridge-bad", sagemaker=spec.sagemaker_data(role_arn="just-a-name"))))
    with pytest.raises(JobError, match=r"sagemaker.role_arn: got 'just-a-name'"):
        to_estimator(job)


def test_dlc_request_is_the_sdks(spec: Any, capture: Any, tmp_path: Path) -> None:
    """Issue 14.2: for AWS's PyTorch image the direct request is the one SDK 2.x sends, sagemaker_* keys and all."""
    (tmp_path / "train.py").write_text("print('hi')\n")
    data = spec.job_data(
        "bridge-dlc",
        image="763104351884.dkr.ecr.us-east-1.amazonaws.com/pytorch-training:2.3.0-gpu-py311-cu121-ubuntu20.04-sagemaker",
        trainer=None,
        command=["python", "train.py", "--epochs", "3", "--lr_max", "0.1"],
        resources={"nodes": 2},
        sagemaker=spec.sagemaker_data(instance_type="ml.p4d.24xlarge", source_dir=str(tmp_path)),
    )
    direct, via_sdk = _both(prepare(Job.parse(data)), capture)
    for request in (direct, via_sdk):
        assert "ContainerEntrypoint" not in request["AlgorithmSpecification"]
        assert [c["ChannelName"] for c in request["InputDataConfig"]] == ["train", "val"]
    same = json.loads(json.dumps(direct).replace(direct["TrainingJobName"], "<NAME>"))
    sdk = json.loads(json.dumps(via_sdk).replace(via_sdk["TrainingJobName"], "<NAME>"))
    sdk.setdefault("EnableManagedSpotTraining", False)
    sdk.pop("ProfilerConfig", None)
    assert sdk["HyperParameters"] == same["HyperParameters"]
    assert json.loads(same["HyperParameters"]["sagemaker_program"]) == "train.py"
    assert same == sdk


@pytest.mark.parametrize("isolated", [False, True])
def test_the_code_the_sdk_ships_is_the_bundle_trainctl_hashed(
    spec: Any, capture: Any, tmp_path: Path, isolated: bool
) -> None:
    """A `code:` job through the estimator: the tarball in S3 that the training job reads (the code channel,
    and sagemaker_submit_directory where the container may reach S3) is trainctl's bundle, whose sha256 the
    launcher checks against TRAINER_CODE_SHA256 before anything runs; with and without network isolation."""
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "train.py").write_text("print('hi')\n")
    data = spec.job_data("bridge-sha", trainer=None, command=["python", "train.py"], code=str(tmp_path / "src"))
    data["sagemaker"] = {**data["sagemaker"], "network_isolation": isolated}
    job = prepare(Job.parse(data))
    target.submit(job, via="estimator", now=NOW, boto_session=capture.session)
    (sent,) = [p for op, p in capture.calls if op == "CreateTrainingJob"]
    (channel,) = [c for c in sent["InputDataConfig"] if c["ChannelName"] == "code"]
    uri = channel["DataSource"]["S3DataSource"]["S3Uri"]
    body = capture.session.client("s3").get_object(Bucket=spec.BUCKET, Key=uri.split("/", 3)[3])["Body"].read()
    assert hashlib.sha256(body).hexdigest() == sent["Environment"]["TRAINER_CODE_SHA256"]
    submitted = json.loads(sent["HyperParameters"]["sagemaker_submit_directory"])
    assert submitted == ("/opt/ml/input/data/code/sourcedir.tar.gz" if isolated else uri)

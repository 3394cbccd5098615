"""Issue 14's request rules: GPU defaults, smddp instance types, Pipe, checkpoint prefixes, unique names,
what retries mean, heterogeneous clusters and the options (warm pools, KMS, isolation, encryption,
pending time, TensorBoard). Each fails on the code before the issue."""

from __future__ import annotations

import json
from datetime import datetime, timezone
from typing import Any

import pytest
from trainctl.errors import JobError
from trainctl.job import Job
from trainctl.submit.bundle import prepare
from trainctl.targets.sagemaker import engine
from trainctl.targets.sagemaker.render import SMDDP_INSTANCE_TYPES, render

NOW = datetime(2026, 11, 21, 12, 0, 0, tzinfo=timezone.utc)
DLC = "763104351884.dkr.ecr.us-east-1.amazonaws.com/pytorch-training:2.3.0-gpu-py311-cu121-ubuntu20.04-sagemaker"


def _problems(data: dict[str, Any]) -> list[str]:
    with pytest.raises(JobError) as info:
        render(prepare(Job.parse(data)))
    return info.value.problems


def test_p4d_uses_its_eight_gpus_when_gpus_per_node_is_unset(spec: Any) -> None:
    """14.1: ml.p4d.24xlarge with gpus_per_node unset rendered --nproc-per-node 1."""
    data = spec.job_data(resources={"nodes": 2}, sagemaker=spec.sagemaker_data(instance_type="ml.p4d.24xlarge"))
    rendered = render(prepare(Job.parse(data)))
    assert rendered.native["AlgorithmSpecification"]["ContainerArguments"][:2] == ["--nproc-per-node", "8"]
    assert "resources.gpus_per_node unset: 8 from ml.p4d.24xlarge (8 processes per node)" in rendered.notes
    # an explicit value stays; more than the instance has is exit 2
    data["resources"] = {"nodes": 2, "gpus_per_node": 4}
    assert render(prepare(Job.parse(data))).native["AlgorithmSpecification"]["ContainerArguments"][1] == "4"
    data["resources"] = {"nodes": 2, "gpus_per_node": 16}
    assert _problems(data)[0] == "resources.gpus_per_node: 16 asked, but ml.p4d.24xlarge has 8 GPU(s)"
    # CPU instances stay at one process unless asked
    cpu = spec.job_data(resources={"nodes": 1}, sagemaker=spec.sagemaker_data(instance_type="ml.m5.xlarge"))
    assert render(prepare(Job.parse(cpu))).native["AlgorithmSpecification"]["ContainerArguments"][1] == "1"


def test_smddp_instance_types_are_the_sdks(aws: str) -> None:
    fw_utils = pytest.importorskip("sagemaker.fw_utils")
    assert set(SMDDP_INSTANCE_TYPES) == set(fw_utils.SM_DATAPARALLEL_SUPPORTED_INSTANCE_TYPES) - {"local_gpu"}


def test_pytorchddp_is_refused_where_smddp_does_not_run(spec: Any, tmp_path: Any) -> None:
    """14.3: distribution pytorchddp on ml.g5.xlarge was accepted."""
    data = spec.job_data(
        image=DLC,
        trainer=None,
        command=["python", "train.py"],
        sagemaker=spec.sagemaker_data(distribution="pytorchddp", instance_type="ml.g5.xlarge", source_dir="src"),
    )
    got = _problems(data)
    assert got == [
        "sagemaker.distribution: pytorchddp (smddp) runs on ml.p3.16xlarge, ml.p3dn.24xlarge, ml.p4d.24xlarge, "
        "ml.p4de.24xlarge only (the SageMaker SDK's list), not ml.g5.xlarge; use distribution: torch_distributed"
    ]
    data["sagemaker"]["instance_type"] = "ml.p4d.24xlarge"
    assert (
        render(prepare(Job.parse(data))).native["HyperParameters"]["sagemaker_distributed_dataparallel_enabled"]
        == "true"
    )


def test_pipe_mode_is_refused_with_the_reason(spec: Any) -> None:
    """14.4: Pipe gives FIFOs <channel>_<epoch>; the trainer and the code channel read files."""
    got = _problems(spec.job_data(sagemaker=spec.sagemaker_data(input_mode="Pipe")))
    assert got == [
        "sagemaker.input_mode: Pipe streams each channel through FIFOs named <channel>_<epoch>, but the trainer "
        "and the code channel read files; use File (copied first) or FastFile (streamed, read as files)"
    ]


def test_checkpoint_uri_is_always_a_folder_prefix(spec: Any) -> None:
    """14.6: s3://bucket/ckpt/run1 is a key prefix that also matches run10."""
    for given in ("s3://trainctl-test/ckpt/run1", "s3://trainctl-test/ckpt/run1/"):
        data = spec.job_data(sagemaker=spec.sagemaker_data(checkpoint_s3_uri=given))
        assert render(prepare(Job.parse(data))).native["CheckpointConfig"]["S3Uri"] == "s3://trainctl-test/ckpt/run1/"
    data = spec.job_data(checkpoint={"dir": "s3://trainctl-test/other"})
    assert render(prepare(Job.parse(data))).native["CheckpointConfig"]["S3Uri"] == "s3://trainctl-test/other/"


def test_two_submits_in_the_same_second_get_two_names(spec: Any, capture: Any) -> None:
    """14.6: names were <job>-<second>, so the second CreateTrainingJob collided."""
    job = prepare(Job.parse(spec.job_data("same-second")))
    first = engine.submit(job, now=NOW, boto_session=capture.session)
    second = engine.submit(job, now=NOW, boto_session=capture.session)
    assert first.native_id != second.native_id
    assert all(r.native_id.startswith("same-second-20261121-120000-") for r in (first, second))
    sent = [p["TrainingJobName"] for op, p in capture.calls if op == "CreateTrainingJob"]
    assert sent == [first.native_id, second.native_id]


def test_retries_say_plainly_what_sagemaker_retries(spec: Any) -> None:
    """14.7: RetryStrategy retries only InternalServerError; the render says so."""
    rendered = render(prepare(Job.parse(spec.job_data(retries=2))))
    assert rendered.native["RetryStrategy"] == {"MaximumRetryAttempts": 2}
    note = next(n for n in rendered.notes if n.startswith("retries:"))
    assert "only when it fails with InternalServerError" in note and "never when the training fails" in note


def _hetero(spec: Any, **changes: Any) -> dict[str, Any]:
    groups = [
        {"name": "train", "instance_type": "ml.p4d.24xlarge", "count": 2, "train": True, "channels": ["train"]},
        {"name": "data", "instance_type": "ml.c5.2xlarge", "count": 3, "channels": ["train", "val"]},
    ]
    section = spec.sagemaker_data(instance_type=None, instance_groups=groups)
    section.update(changes)
    return spec.job_data("hetero", resources={"nodes": 2}, sagemaker=section)


def test_instance_groups_render_instance_groups_only(spec: Any) -> None:
    """14.8: InstanceGroups, never InstanceType/InstanceCount; every channel assigned; the training group named."""
    request = render(prepare(Job.parse(_hetero(spec)))).native
    assert request["ResourceConfig"] == {
        "InstanceGroups": [
            {"InstanceType": "ml.p4d.24xlarge", "InstanceCount": 2, "InstanceGroupName": "train"},
            {"InstanceType": "ml.c5.2xlarge", "InstanceCount": 3, "InstanceGroupName": "data"},
        ],
        "VolumeSizeInGB": 100,
    }
    names = {
        c["ChannelName"]: c["DataSource"]["S3DataSource"]["InstanceGroupNames"] for c in request["InputDataConfig"]
    }
    assert names == {"train": ["train", "data"], "val": ["data"]}
    hp = request["HyperParameters"]
    assert json.loads(hp["sagemaker_distribution_instance_groups"]) == ["train"]
    assert json.loads(hp["sagemaker_instance_type"]) == "ml.p4d.24xlarge"
    assert request["AlgorithmSpecification"]["ContainerArguments"][:2] == ["--nproc-per-node", "8"]


def test_instance_group_mistakes_are_exit_2(spec: Any) -> None:
    got = _problems(_hetero(spec, instance_type="ml.g5.xlarge"))
    assert got[0].startswith("sagemaker.instance_type: not together with sagemaker.instance_groups")
    data = _hetero(spec)
    data["sagemaker"]["instance_groups"][1]["channels"] = ["train"]
    assert _problems(data) == [
        "sagemaker.instance_groups: channels val are in no group's channels; when any group lists channels "
        "SageMaker needs every channel assigned"
    ]
    data = _hetero(spec)
    data["resources"] = {"nodes": 3}
    assert _problems(data) == ["resources.nodes: 3, but the training group 'train' has count 2; make them equal"]
    data = _hetero(spec)
    data["sagemaker"]["instance_groups"][0]["train"] = False
    assert _problems(data)[0].startswith("sagemaker.instance_groups: exactly one group needs train: true")


def test_options_render_their_fields(spec: Any) -> None:
    data = spec.job_data(
        sagemaker=spec.sagemaker_data(
            keep_alive_period="30m",
            max_pending_time="3h",
            output_kms_key_id="alias/out",
            volume_kms_key_id="alias/vol",
            network_isolation=True,
            inter_container_encryption=True,
            tensorboard_s3_uri="s3://trainctl-test/tb/",
        )
    )
    request = render(prepare(Job.parse(data))).native
    assert request["ResourceConfig"]["KeepAlivePeriodInSeconds"] == 1800
    assert request["ResourceConfig"]["VolumeKmsKeyId"] == "alias/vol"
    assert request["OutputDataConfig"]["KmsKeyId"] == "alias/out"
    assert request["EnableNetworkIsolation"] is True and request["EnableInterContainerTrafficEncryption"] is True
    assert request["StoppingCondition"]["MaxPendingTimeInSeconds"] == 10800
    assert request["TensorBoardOutputConfig"] == {
        "S3OutputPath": "s3://trainctl-test/tb/",
        "LocalPath": "/opt/ml/model/tensorboard",  # where trainctl's trainer writes its events
    }
    plain = render(prepare(Job.parse(spec.job_data()))).native
    assert not {"EnableNetworkIsolation", "TensorBoardOutputConfig"} & set(plain)
    assert "KeepAlivePeriodInSeconds" not in plain["ResourceConfig"]


def test_an_s3_output_dir_and_checkpoint_dir_are_the_services_own_uploads(spec: Any) -> None:
    """issue 35 §4: the `output_dir`/`checkpoint.dir` a job names as s3:// on every target are, on SageMaker, the
    request's OutputDataConfig.S3OutputPath and CheckpointConfig.S3Uri (CreateTrainingJob in botocore's model),
    which the service uploads /opt/ml/model and /opt/ml/checkpoints to: the launcher gets no --output-s3."""
    import botocore.session

    shape = botocore.session.get_session().get_service_model("sagemaker").operation_model("CreateTrainingJob")
    members = shape.input_shape.members
    assert "S3OutputPath" in members["OutputDataConfig"].members and "S3Uri" in members["CheckpointConfig"].members
    data = spec.job_data(output_dir=f"s3://{spec.BUCKET}/out/", checkpoint={"dir": f"s3://{spec.BUCKET}/ckpt/"},
                         sagemaker=spec.sagemaker_data(output_s3_uri=None))  # fmt: skip
    native = render(prepare(Job.parse(data))).native
    assert native["OutputDataConfig"]["S3OutputPath"] == f"s3://{spec.BUCKET}/out/"
    assert native["CheckpointConfig"]["S3Uri"].startswith(f"s3://{spec.BUCKET}/ckpt/")
    assert "--output-s3" not in json.dumps(native)

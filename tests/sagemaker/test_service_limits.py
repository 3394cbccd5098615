"""trainctl's SageMaker limits against botocore's own service model, and every rendered request against it.

`limits.py` holds the numbers as constants (render needs no botocore); here each is read back from the
model, so a drift fails. Every request the tests render (the golden cases, the rule cases, options, groups)
goes through botocore's ParamValidator (types, required members, enums, minimums) and a walk of the model
for what ParamValidator leaves out: maximum lengths, patterns, list and map sizes.
"""

from __future__ import annotations

import importlib
import json
import re
import unicodedata
from pathlib import Path
from typing import Any

import pytest
from trainctl.errors import JobError
from trainctl.job import Job
from trainctl.submit.bundle import prepare
from trainctl.targets.sagemaker import limits
from trainctl.targets.sagemaker.render import render

botocore_session = pytest.importorskip("botocore.session")
regex = pytest.importorskip("regex", reason="the model's tag patterns use \\p{L}, which only `regex` reads")


def _request_shape() -> Any:
    model = botocore_session.get_session().get_service_model("sagemaker")
    return model.operation_model("CreateTrainingJob").input_shape


def _member(path: str) -> Any:
    shape = _request_shape()
    for part in path.split("."):
        if part == "[]":
            shape = shape.member
        elif part == "{key}":
            shape = shape.key
        elif part == "{value}":
            shape = shape.value
        else:
            shape = shape.members[part]
    return shape


CONSTANTS = {
    "MAX_TAGS": ("Tags", "max"),
    "TAG_KEY_MAX": ("Tags.[].Key", "max"),
    "TAG_VALUE_MAX": ("Tags.[].Value", "max"),
    "MAX_CHANNELS": ("InputDataConfig", "max"),
    "CHANNEL_NAME_MAX": ("InputDataConfig.[].ChannelName", "max"),
    "MAX_HYPERPARAMETERS": ("HyperParameters", "max"),
    "HYPERPARAMETER_KEY_MAX": ("HyperParameters.{key}", "max"),
    "HYPERPARAMETER_VALUE_MAX": ("HyperParameters.{value}", "max"),
    "MAX_SUBNETS": ("VpcConfig.Subnets", "max"),
    "MAX_SECURITY_GROUPS": ("VpcConfig.SecurityGroupIds", "max"),
    "VPC_ID_MAX": ("VpcConfig.Subnets.[]", "max"),
    "IMAGE_MAX": ("AlgorithmSpecification.TrainingImage", "max"),
    "S3_URI_MAX": ("OutputDataConfig.S3OutputPath", "max"),
    "MAX_ENVIRONMENT": ("Environment", "max"),
    "ENVIRONMENT_KEY_MAX": ("Environment.{key}", "max"),
    "ENVIRONMENT_VALUE_MAX": ("Environment.{value}", "max"),
    "KMS_KEY_MAX": ("OutputDataConfig.KmsKeyId", "max"),
    "MAX_INSTANCE_GROUPS": ("ResourceConfig.InstanceGroups", "max"),
    "INSTANCE_GROUP_NAME_MAX": ("ResourceConfig.InstanceGroups.[].InstanceGroupName", "max"),
    "KEEP_ALIVE_MAX_S": ("ResourceConfig.KeepAlivePeriodInSeconds", "max"),
    "MAX_PENDING_MIN_S": ("StoppingCondition.MaxPendingTimeInSeconds", "min"),
    "MAX_PENDING_MAX_S": ("StoppingCondition.MaxPendingTimeInSeconds", "max"),
    "MAX_RETRY_ATTEMPTS": ("RetryStrategy.MaximumRetryAttempts", "max"),
}
PATTERNS = {
    "CHANNEL_NAME": "InputDataConfig.[].ChannelName",
    "VPC_ID": "VpcConfig.SecurityGroupIds.[]",
    "ENVIRONMENT_KEY": "Environment.{key}",
    "KMS_KEY": "ResourceConfig.VolumeKmsKeyId",
}


@pytest.mark.parametrize("name", sorted(CONSTANTS))
def test_each_limit_is_the_service_models(name: str) -> None:
    path, bound = CONSTANTS[name]
    assert getattr(limits, name) == _member(path).metadata[bound], f"{name} vs {path}.{bound}"


def test_patterns_and_tag_characters_are_the_service_models() -> None:
    for name, path in PATTERNS.items():
        assert getattr(limits, name).pattern == _member(path).metadata["pattern"], name
    for path in ("Tags.[].Key", "Tags.[].Value"):
        assert _member(path).metadata["pattern"] == r"([\p{L}\p{Z}\p{N}_.:/=+\-@]*)"
    # the model's own class, read by `regex`, agrees with limits._tag_text_ok on every BMP character
    model = regex.compile(r"([\p{L}\p{Z}\p{N}_.:/=+\-@]*)")
    for code in range(0x10000):
        c = chr(code)
        if unicodedata.category(c) in ("Cn", "Cs"):
            continue  # unassigned in this Python's Unicode tables (regex may know newer ones), surrogates
        assert bool(model.fullmatch(c)) == limits._tag_text_ok(c), hex(code)


def _walk(shape: Any, value: Any, path: str, found: list[str]) -> None:
    meta = shape.metadata
    if shape.type_name == "string":
        if "max" in meta and len(value) > meta["max"]:
            found.append(f"{path}: length {len(value)} > {meta['max']}")
        if "pattern" in meta and not regex.fullmatch(meta["pattern"], value):
            found.append(f"{path}: {value!r} does not match {meta['pattern']}")
    elif shape.type_name in ("integer", "long"):
        if "max" in meta and value > meta["max"]:
            found.append(f"{path}: {value} > {meta['max']}")
    elif shape.type_name == "list":
        if "max" in meta and len(value) > meta["max"]:
            found.append(f"{path}: {len(value)} items > {meta['max']}")
        for i, item in enumerate(value):
            _walk(shape.member, item, f"{path}[{i}]", found)
    elif shape.type_name == "map":
        if "max" in meta and len(value) > meta["max"]:
            found.append(f"{path}: {len(value)} entries > {meta['max']}")
        for key, item in value.items():
            _walk(shape.key, key, f"{path}.<key {key}>", found)
            _walk(shape.value, item, f"{path}.{key}", found)
    elif shape.type_name == "structure":
        for key, item in value.items():
            _walk(shape.members[key], item, f"{path}.{key}" if path else key, found)


def service_model_problems(request: dict[str, Any]) -> list[str]:
    """What SageMaker's model says about one request: ParamValidator's report, then lengths/patterns/sizes."""
    from botocore.validate import ParamValidator

    shape = _request_shape()
    report = ParamValidator().validate(request, shape)
    found = [report.generate_report()] if report.has_errors() else []
    _walk(shape, request, "", found)
    return found


GOLDEN = Path(__file__).resolve().parents[1] / "golden" / "sagemaker"


def valid_cases(spec: Any) -> dict[str, Job]:
    """Requests at the model's limits and with every option, beside the golden files."""
    dlc = "763104351884.dkr.ecr.us-east-1.amazonaws.com/pytorch-training:2.3.0-gpu-py311-cu121-ubuntu20.04-sagemaker"
    bucket = spec.BUCKET
    at_limits = spec.job_data(
        "at-limits",
        trainer=None,
        command=["python", "t.py", *[x for i in range(94) for x in (f"--f{i}", "1")]],
        data={f"c{i}": f"s3://{bucket}/d{i}/" for i in range(19)},
        env={f"E{i}": "v" * 512 for i in range(99)},
        secrets=[{"env": "TOKEN", "name": "prod/token"}],
        sagemaker=spec.sagemaker_data(
            source_dir="src",
            tags={f"team:{i}/é +=@-_.": "x" * 256 for i in range(49)},
            subnets=[f"subnet-{i:017x}" for i in range(16)],
            security_group_ids=[f"sg-{i:017x}" for i in range(5)],
        ),
    )
    options = spec.job_data(
        "options",
        sagemaker=spec.sagemaker_data(
            keep_alive_period="6h",
            max_pending_time="2h",
            output_kms_key_id="arn:aws:kms:us-east-1:123456789012:key/1234abcd-12ab-34cd-56ef-1234567890ab",
            volume_kms_key_id="alias/training",
            network_isolation=True,
            inter_container_encryption=True,
            tensorboard_s3_uri=f"s3://{bucket}/tb/",
        ),
        retries=3,
    )
    hetero = spec.job_data(
        "hetero",
        resources={"nodes": 2},
        sagemaker=spec.sagemaker_data(
            instance_type=None,
            instance_groups=[
                {"name": "train", "instance_type": "ml.p4d.24xlarge", "count": 2, "train": True, "channels": ["train"]},
                {"name": "data", "instance_type": "ml.c5.2xlarge", "count": 3, "channels": ["train", "val"]},
            ],
        ),
    )
    toolkit = spec.job_data(
        "dlc",
        image=dlc,
        trainer=None,
        command=["python", "train.py", "--lr_max", "0.1"],
        resources={"nodes": 4},
        sagemaker=spec.sagemaker_data(instance_type="ml.p5.48xlarge", source_dir="src", region=None),
    )
    return {
        name: prepare(Job.parse(data))
        for name, data in [("at-limits", at_limits), ("options", options), ("hetero", hetero), ("dlc", toolkit)]
    }


def _rendered_cases(spec: Any) -> dict[str, dict[str, Any]]:
    """Every golden request (byte-for-byte what render gives, tests/sagemaker/test_request.py) and the cases above."""
    requests = [p for p in sorted(GOLDEN.glob("*.json")) if not p.name.startswith("tuning-")]  # test_tuning.py's
    cases = {path.name: json.loads(path.read_text()) for path in requests}
    cases.update({name: render(job).native for name, job in valid_cases(spec).items()})
    return cases


def test_every_rendered_request_passes_the_service_model(spec: Any) -> None:
    cases = _rendered_cases(spec)
    assert len(cases) >= 8
    for name, request in cases.items():
        assert service_model_problems(request) == [], name


def test_the_checker_itself_catches_what_the_model_forbids(spec: Any) -> None:
    """The walk is not vacuous: a request over each limit is reported (so a pass above means something)."""
    request = render(prepare(Job.parse(spec.job_data()))).native
    request["Tags"] = [{"Key": f"k{i}", "Value": "v"} for i in range(51)]
    request["Tags"][0]["Value"] = "bad\x00value"
    request["VpcConfig"] = {"Subnets": [f"subnet-{i}" for i in range(17)], "SecurityGroupIds": ["sg-1"]}
    found = "\n".join(service_model_problems(request))
    assert "Tags: 51 items > 50" in found and "Tags[0].Value" in found and "Subnets: 17 items > 16" in found


def test_a_60_tag_job_is_refused_naming_sagemaker_tags(spec: Any) -> None:
    """Issue 14.5: 60 tags (61 with trainctl:job) used to render; SageMaker takes 50."""
    data = spec.job_data(sagemaker=spec.sagemaker_data(tags={f"team{i}": "ml" for i in range(60)}))
    with pytest.raises(JobError) as info:
        render(prepare(Job.parse(data)))
    assert info.value.problems == [
        "sagemaker.tags: 60 tags; SageMaker allows 50 per training job and trainctl adds 1 (trainctl:job), so at most 49"
    ]
    assert render(
        prepare(Job.parse(spec.job_data(sagemaker=spec.sagemaker_data(tags={f"t{i}": "x" for i in range(49)}))))
    )


@pytest.mark.parametrize(
    ("changes", "expected"),
    [
        ({"sagemaker": {"tags": {"aws:owner": "me"}}}, "sagemaker.tags: key 'aws:owner': the aws: prefix is reserved"),
        ({"sagemaker": {"tags": {"team": "a;b"}}}, "sagemaker.tags: value 'a;b' has ';'"),
        ({"sagemaker": {"tags": {"team": "x" * 257}}}, "sagemaker.tags.team: value of 257 characters; at most 256"),
        ({"sagemaker": {"tags": {"k" * 129: "v"}}}, "sagemaker.tags: key 'kkkk"),
        (
            {"data": {"train": "s3://trainctl-test/d/", **{f"c{i}": "s3://trainctl-test/d/" for i in range(20)}}},
            "data: 21 input channels",
        ),
        (
            {"sagemaker": {"subnets": [f"subnet-{i}" for i in range(17)], "security_group_ids": ["sg-1"]}},
            "sagemaker.subnets: 17 given; SageMaker allows at most 16",
        ),
        (
            {"sagemaker": {"subnets": ["subnet-1"], "security_group_ids": [f"sg-{i}" for i in range(6)]}},
            "sagemaker.security_group_ids: 6 given; SageMaker allows at most 5",
        ),
        (
            {"image": "123456789012.dkr.ecr.us-east-1.amazonaws.com/" + "r" * 220},
            "image: 265 characters; SageMaker allows at most 255",
        ),
        (
            {"data": {"train": "s3://trainctl-test/" + "p" * 1010}},
            "data.train: 1029 characters; SageMaker allows S3 URIs of at most 1024",
        ),
        (
            {"sagemaker": {"output_kms_key_id": "key with spaces"}},
            "sagemaker.output_kms_key_id: 'key with spaces' is not a KMS key",
        ),
        (
            {"sagemaker": {"keep_alive_period": "7h"}},
            "sagemaker.keep_alive_period: 25200s; SageMaker keeps warm pools at most 21600s",
        ),
        (
            {"sagemaker": {"max_pending_time": "10m"}},
            "sagemaker.max_pending_time: 600s; SageMaker accepts 1800s to 2419200s",
        ),
    ],
)
def test_model_limits_are_refused_with_the_field(spec: Any, changes: dict[str, Any], expected: str) -> None:
    data = spec.job_data()
    for key, value in changes.items():
        data[key] = {**data[key], **value} if key == "sagemaker" else value
    with pytest.raises(JobError) as info:
        render(prepare(Job.parse(data)))
    assert any(p.startswith(expected) for p in info.value.problems), info.value.problems


def test_more_than_100_hyperparameters_is_refused(spec: Any) -> None:
    flags = [x for i in range(101) for x in (f"--f{i}", "1")]
    data = spec.job_data(
        trainer=None, command=["python", "t.py", *flags], sagemaker=spec.sagemaker_data(source_dir="src")
    )
    with pytest.raises(JobError) as info:
        render(prepare(Job.parse(data)))
    assert info.value.problems[0].startswith("command: 105 hyperparameters; SageMaker allows at most 100")


def test_limits_module_cites_each_constant() -> None:
    text = importlib.import_module("trainctl.targets.sagemaker.limits").__file__
    assert text is not None
    source = Path(text).read_text()
    for name in CONSTANTS:
        assert re.search(rf"^{name} = .*# \w", source, re.M), f"{name} has no shape comment"

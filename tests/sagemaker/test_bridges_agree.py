"""trainctl's request, SDK 2.x's estimator and SDK 3.x's ModelTrainer agree on every field (issue 23).

For each case below, one job sent three ways to the moto server: trainctl's own CreateTrainingJob request
(`via="direct"`), the request SDK 2.x sends for `job.to_estimator()` (`via="estimator"`, here) and the one
SDK 3.x sends for `job.to_model_trainer()` (sm3_driver.py in .venv-sm3), each as botocore was handed it.
They are compared key by key (run names swapped for <NAME>). Where an SDK adds a field, leaves one out or
writes its own value, EXPECTED lists it and WHY cites the SDK source that shows why; the test fails on a
difference that is not listed and on a listed one that did not happen, so nothing is dropped silently.
The cases together set every CreateTrainingJob member that trainctl's request builder writes
(`test_the_cases_set_every_field_trainctl_writes`, against botocore's service model).
"""

from __future__ import annotations

import ast
import json
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest
from trainctl.errors import JobError
from trainctl.job import Job
from trainctl.submit.bundle import prepare
from trainctl.targets.sagemaker import engine

pytest.importorskip("sagemaker.pytorch", reason="the estimator bridge needs trainctl[sagemaker]")

NOW = datetime(2026, 11, 21, 15, 0, 0, tzinfo=timezone.utc)
DLC = "763104351884.dkr.ecr.us-east-1.amazonaws.com/pytorch-training:2.3.0-gpu-py311-cu121-ubuntu20.04-sagemaker"

CHANNEL_LEAVES = ("S3DataType", "S3Uri", "S3DataDistributionType", "InstanceGroupNames")
# Why an SDK's request differs from trainctl's, with the SDK source that shows it.
WHY = {
    "profiler": "the bridge turns SDK 2's profiler off (disable_profiler=True); SDK 2 still writes ProfilerConfig "
    "{DisableProfiler: true} (sagemaker/estimator.py EstimatorBase._prepare_profiler_for_training makes a "
    "ProfilerConfig, _TrainingJob._get_train_args writes its _to_request_dict(), "
    "sagemaker/debugger/profiler_config.py)",
    "script mode": "SDK 2 always writes its script-mode keys (sagemaker/estimator.py "
    "Framework._script_mode_hyperparam_update): program, submit directory, log level, job name, region",
    "entry shim": "SDK 2 needs an entry point (sagemaker/pytorch/estimator.py PyTorch.__init__: 'Argument "
    "entry_point must be set'), so a job without code ships the bridge's shim, sagemaker_entry.py, in its own "
    "code channel (estimator.py channels)",
    "max pending": "SDK 2 cannot say it: sagemaker/job.py _Job._prepare_stop_condition(max_run, max_wait) writes "
    "MaxRuntimeInSeconds and MaxWaitTimeInSeconds only, and EstimatorBase.__init__ takes no pending time; "
    "to_estimator refuses such a job (test_sdk2_refuses_what_it_cannot_carry)",
    "spot off": "SDK 2 leaves EnableManagedSpotTraining out when it is false, SageMaker's default "
    "(sagemaker/session.py Session._get_train_request: `if use_spot_instances:`)",
    "spec hash": "the job SDK 2 is given lacks max_pending_time (it cannot carry it), so TRAINCTL_PROVENANCE's "
    "spec_sha256 differs (trainctl/runs/provenance.py); the rest of that variable is the same",
    "compression": "SDK 3 always names the output compression, GZIP (SageMaker's default when left out): "
    "sagemaker/train/defaults.py TrainDefaults.get_output_data_config",
}


def _source(tmp_path: Path) -> Path:
    src = tmp_path / "src"
    (src / "pkg").mkdir(parents=True)
    (src / "train.py").write_text("print('hi')\n")
    (src / "pkg" / "__init__.py").write_text("")
    return src


def _every_field(spec: Any, src: Path) -> dict[str, Any]:
    """A code job on trainctl's image that sets every field an instance-type job can have."""
    kms = f"arn:aws:kms:{spec.REGION}:123456789012:key"
    return spec.job_data(
        "every-field",
        trainer=None,
        command=["python", "train.py", "--epochs", "3", "--lr", "0.1"],
        code={"dir": str(src)},
        resources={"nodes": 2, "gpus_per_node": 8, "max_restarts": 1},
        max_runtime="2h",
        spot=True,
        retries=2,
        env={"A": "1"},
        secrets=[{"env": "TOKEN", "name": "prod/token", "key": "value"}],
        checkpoint={"dir": f"s3://{spec.BUCKET}/ckpt/every-field/"},
        sagemaker=spec.sagemaker_data(
            instance_type="ml.p4d.24xlarge",
            volume_size_gb=200,
            input_mode="FastFile",
            max_wait="3h",
            max_pending_time="4h",
            keep_alive_period="30m",
            output_kms_key_id=f"{kms}/out",
            volume_kms_key_id=f"{kms}/vol",
            network_isolation=True,
            inter_container_encryption=True,
            tensorboard_s3_uri=f"s3://{spec.BUCKET}/tb/",
            subnets=["subnet-1"],
            security_group_ids=["sg-1"],
            tags={"team": "ml"},
            code_s3_prefix=f"s3://{spec.BUCKET}/code/",
        ),
    )


def _instance_groups(spec: Any) -> dict[str, Any]:
    """A trainer job (no code: SDK 2 ships its shim) on a heterogeneous cluster whose groups name their channels."""
    groups = [
        {"name": "train", "instance_type": "ml.g5.xlarge", "count": 2, "train": True, "channels": ["train", "val"]},
        {"name": "data", "instance_type": "ml.c5.xlarge", "count": 1, "channels": ["train"]},
    ]
    return spec.job_data("groups", sagemaker=spec.sagemaker_data(instance_type=None, instance_groups=groups))


def _toolkit(spec: Any, src: Path) -> dict[str, Any]:
    """A code job on AWS's PyTorch image, which its sagemaker-training toolkit starts (no entry point of ours),
    under network isolation: the toolkit cannot download the code, so it comes as the `code` channel."""
    return spec.job_data(
        "toolkit",
        image=DLC,
        trainer=None,
        command=["python", "train.py", "--epochs", "3"],
        code={"dir": str(src)},
        resources={"nodes": 2, "gpus_per_node": 4},
        sagemaker=spec.sagemaker_data(instance_type="ml.p4d.24xlarge", network_isolation=True),
    )


def flat(request: dict[str, Any]) -> dict[str, Any]:
    """Leaf path -> value, the run's name as <NAME>; channels keyed by name, hyperparameters as sent."""
    out: dict[str, Any] = {}

    def walk(node: Any, path: str) -> None:
        if isinstance(node, dict) and node:
            for key, value in node.items():
                walk(value, f"{path}.{key}" if path else key)
        elif isinstance(node, list) and node and all(isinstance(c, dict) and "ChannelName" in c for c in node):
            for c in node:
                walk({k: v for k, v in c.items() if k != "ChannelName"}, f"{path}.{c['ChannelName']}")
        else:
            out[path] = node

    walk(json.loads(json.dumps(request).replace(request["TrainingJobName"], "<NAME>")), "")
    return out


def differences(ours: dict[str, Any], theirs: dict[str, Any]) -> dict[str, str]:
    """path -> added (only the SDK's request has it), dropped (only trainctl's) or changed."""
    a, b = flat(ours), flat(theirs)
    found = {p: "dropped" for p in a.keys() - b.keys()}
    found |= {p: "added" for p in b.keys() - a.keys()}
    found |= {p: "changed" for p in a.keys() & b.keys() if a[p] != b[p]}
    return dict(sorted(found.items()))


def _case(name: str, spec: Any, tmp_path: Path) -> dict[str, Any]:
    src = _source(tmp_path)
    if name == "every-field":
        return _every_field(spec, src)
    return _instance_groups(spec) if name == "instance-groups" else _toolkit(spec, src)


SCRIPT_MODE = [f"HyperParameters.sagemaker_{key}" for key in ("container_log_level", "job_name", "region")]
SHIM = [
    "HyperParameters.sagemaker_program",
    "HyperParameters.sagemaker_submit_directory",
    *(f"InputDataConfig.code.DataSource.S3DataSource.{key}" for key in CHANNEL_LEAVES),
]
SDK3 = {"OutputDataConfig.CompressionType": ("added", "compression")}
EXPECTED: dict[str, dict[str, dict[str, tuple[str, str]]]] = {
    "every-field": {
        "sdk2": {
            **dict.fromkeys(SCRIPT_MODE, ("added", "script mode")),
            "ProfilerConfig.DisableProfiler": ("added", "profiler"),
            "StoppingCondition.MaxPendingTimeInSeconds": ("dropped", "max pending"),
            "Environment.TRAINCTL_PROVENANCE": ("changed", "spec hash"),
        },
        "sdk3": SDK3,
    },
    "instance-groups": {
        "sdk2": {
            **dict.fromkeys(SCRIPT_MODE, ("added", "script mode")),
            **dict.fromkeys(SHIM, ("added", "entry shim")),
            "ProfilerConfig.DisableProfiler": ("added", "profiler"),
            "EnableManagedSpotTraining": ("dropped", "spot off"),
        },
        "sdk3": SDK3,
    },
    "toolkit": {
        "sdk2": {
            "ProfilerConfig.DisableProfiler": ("added", "profiler"),
            "EnableManagedSpotTraining": ("dropped", "spot off"),
        },
        "sdk3": SDK3,
    },
}


def _explained(found: dict[str, str], expected: dict[str, tuple[str, str]]) -> list[str]:
    """Every difference that is not listed, or listed as another kind, and every listed one that did not happen."""
    wrong = [f"{path}: {kind}, not listed" for path, kind in found.items() if path not in expected]
    wrong += [
        f"{path}: {found.get(path, 'the same')}, listed as {kind} ({WHY[why]})"
        for path, (kind, why) in expected.items()
        if found.get(path) != kind
    ]
    return wrong


@pytest.mark.parametrize("case", list(EXPECTED))
def test_the_sdks_send_trainctls_request(spec: Any, capture: Any, tmp_path: Path, case: str) -> None:
    """Each SDK's own CreateTrainingJob request against trainctl's, key by key, differences as listed."""
    data = _case(case, spec, tmp_path)
    engine.submit(prepare(Job.parse(data)), now=NOW, boto_session=capture.session)
    ours = capture.only("CreateTrainingJob")
    capture.calls.clear()
    closest = json.loads(json.dumps(data))  # the job less what SDK 2 cannot carry (it refuses those: below)
    closest["sagemaker"].pop("max_pending_time", None)
    engine.submit(
        prepare(Job.parse(closest)), via="estimator", now=NOW + timedelta(seconds=1), boto_session=capture.session
    )
    sdk2 = capture.only("CreateTrainingJob")
    sdk3: dict[str, Any] = spec.run_sdk3(data, tmp_path, "submit")["request"]
    assert _explained(differences(ours, sdk2), EXPECTED[case]["sdk2"]) == []
    assert _explained(differences(ours, sdk3), EXPECTED[case]["sdk3"]) == []
    assert len(flat(ours)) > 20  # the comparison is not vacuous


def test_sdk2_refuses_what_it_cannot_carry(spec: Any, aws: str, tmp_path: Path) -> None:
    """StoppingCondition.MaxPendingTimeInSeconds (WHY["max pending"]) is refused, naming the job's field."""
    job = prepare(Job.parse(_every_field(spec, _source(tmp_path))))
    with pytest.raises(JobError) as info:
        job.to_estimator()
    assert info.value.problems == [
        "sagemaker.max_pending_time: not something the estimator bridge (SDK 2.x) builds; use via='direct'"
    ]
    groups = _instance_groups(spec)
    groups["sagemaker"]["network_isolation"] = True
    with pytest.raises(JobError, match=r"- sagemaker.network_isolation: not through the estimator bridge when"):
        prepare(Job.parse(groups)).to_estimator()


def _member_names(shape: Any, seen: set[str]) -> set[str]:
    """Every member name at any depth of a botocore shape (structures' members, lists' items, maps' values)."""
    if shape.name in seen:
        return set()
    seen.add(shape.name)
    names: set[str] = set()
    for name, member in getattr(shape, "members", {}).items():
        names |= {name} | _member_names(member, seen)
    for inner in ("member", "value"):
        if hasattr(shape, inner):
            names |= _member_names(getattr(shape, inner), seen)
    return names


def _keys(node: Any) -> set[str]:
    if isinstance(node, dict):
        return set(node).union(*(_keys(v) for v in node.values()))
    if isinstance(node, list):
        return set().union(*(_keys(v) for v in node))
    return set()


def test_the_cases_set_every_field_trainctl_writes(spec: Any, tmp_path: Path) -> None:
    """Every CreateTrainingJob member named in trainctl's request builder (request.py, groups.py) is in the cases'
    requests, so a field added to the request is compared above, through both SDKs, or this fails."""
    import botocore.session
    from trainctl.targets.sagemaker import groups, request
    from trainctl.targets.sagemaker.render import render

    model = botocore.session.get_session().get_service_model("sagemaker")
    members = _member_names(model.operation_model("CreateTrainingJob").input_shape, set())
    named = {
        node.value
        for module in (request, groups)
        for node in ast.walk(ast.parse(Path(module.__file__ or "").read_text()))
        if isinstance(node, ast.Constant) and isinstance(node.value, str)
    }
    written = members & named
    assert {"TrainingJobName", "InstanceGroupNames", "MaxPendingTimeInSeconds", "KmsKeyId"} <= written
    cases = set().union(*(_keys(render(prepare(Job.parse(_case(c, spec, tmp_path / c)))).native) for c in EXPECTED))
    assert sorted(written - cases) == []

"""The pure side: the CreateTrainingJob request, its golden files, names, hyperparameters and validation."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pytest
from trainctl.errors import JobError
from trainctl.job import Job
from trainctl.submit.bundle import prepare
from trainctl.targets.sagemaker import request as req
from trainctl.targets.sagemaker.render import render

GOLDEN = Path(__file__).resolve().parents[1] / "golden" / "sagemaker"
REPO = Path(__file__).resolve().parents[2]
NAME_PATTERN = re.compile(r"^[a-zA-Z0-9](-*[a-zA-Z0-9]){0,62}$")


def problems(data: dict[str, Any]) -> list[str]:
    job = prepare(Job.parse(data))
    with pytest.raises(JobError) as info:
        render(job)
    return info.value.problems


def golden_cases(spec: Any) -> dict[str, Job]:
    command = spec.job_data(
        "train-script",
        trainer=None,
        command=["python", "train.py", "--epochs", "3", "--run-name=demo"],
        resources={"nodes": 1, "gpus_per_node": 4, "procs_per_node": 4, "max_restarts": 2},
        data={"train": f"s3://{spec.BUCKET}/text/"},
        env={"HF_HOME": "/tmp/hf"},
        hang={"quiet_for": "20m", "progress": r"^\[step \d+\]"},
        secrets=[{"env": "WANDB_API_KEY", "name": "prod/wandb", "key": "api_key"}],
        retries=2,
        sagemaker=spec.sagemaker_data(
            instance_type="ml.g5.12xlarge",
            source_dir="src",
            subnets=["subnet-0abc"],
            security_group_ids=["sg-0abc"],
            tags={"team": "ml"},
        ),
    )
    ddp = spec.job_data(
        "dlc-ddp",
        image="763104351884.dkr.ecr.us-east-1.amazonaws.com/pytorch-training:2.3.0-gpu-py311-cu121-ubuntu20.04-sagemaker",
        trainer=None,
        command=["python", "train.py", "--epochs", "3"],
        resources={"nodes": 2},  # gpus_per_node unset: 8 from ml.p4d.24xlarge
        data={},
        sagemaker=spec.sagemaker_data(
            instance_type="ml.p4d.24xlarge", distribution="pytorchddp", input_mode="FastFile", source_dir="src"
        ),
    )
    cpu = spec.job_data(
        "cpu-smoke",
        resources={"nodes": 1, "procs_per_node": 2},
        trainer={
            "model": "digits",
            "batch_size": 32,
            "epochs": 2,
            "lr": 0.003,
            "hang_timeout": 900,
            "stragglers": "exclude",
        },
        data={"train": f"s3://{spec.BUCKET}/digits/train.jsonl"},
        max_runtime=None,
        sagemaker=spec.sagemaker_data(instance_type="ml.m5.xlarge", region=None),
    )
    return {
        "digits-sagemaker": prepare(Job.from_yaml(REPO / "examples" / "digits-sagemaker.yaml")),
        "command-source-dir": prepare(Job.parse(command)),
        "pytorchddp-dlc": prepare(Job.parse(ddp)),
        "cpu-defaults": prepare(Job.parse(cpu)),
    }


def test_golden_requests(spec: Any, golden: Callable[[Path, str], None]) -> None:
    """Every case renders to its golden file byte for byte (UPDATE_GOLDEN=1 rewrites them)."""
    for case, job in golden_cases(spec).items():
        rendered = render(job)
        golden(GOLDEN / f"{case}.json", rendered.text)
        assert json.loads(rendered.text) == rendered.native
        assert render(job).text == rendered.text, "render must be deterministic"


def test_request_shape(spec: Any) -> None:
    job = prepare(Job.from_yaml(REPO / "examples" / "digits-sagemaker.yaml"))
    r = render(job).native
    alg = r["AlgorithmSpecification"]
    assert alg["TrainingImage"] == job.image and alg["TrainingInputMode"] == "File"
    assert alg["ContainerEntrypoint"] == ["train"]
    assert alg["ContainerArguments"] == ["--nproc-per-node", "1", "--max-restarts", "0"]
    assert r["ResourceConfig"] == {"InstanceType": "ml.g5.xlarge", "InstanceCount": 2, "VolumeSizeInGB": 50}
    # one prefix per training job: <output>/<training job name>/checkpoints/ (a new run never sees another's)
    assert r["CheckpointConfig"] == {
        "S3Uri": f"s3://trainctl-demo/output/{r['TrainingJobName']}/checkpoints/",
        "LocalPath": "/opt/ml/checkpoints",
    }
    assert r["StoppingCondition"] == {"MaxRuntimeInSeconds": 3600, "MaxWaitTimeInSeconds": 7200}
    assert r["EnableManagedSpotTraining"] is True
    assert r["RetryStrategy"] == {"MaximumRetryAttempts": 1}
    assert [c["ChannelName"] for c in r["InputDataConfig"]] == ["train", "val"]
    assert "VpcConfig" not in r
    hp = r["HyperParameters"]
    assert hp["sagemaker_torch_distributed_enabled"] == "true"
    assert hp["sagemaker_instance_type"] == '"ml.g5.xlarge"'
    assert hp["train_data"] == '"/opt/ml/input/data/train"' and hp["checkpoint_dir"] == '"/opt/ml/checkpoints"'


def test_secrets_are_names_only(spec: Any) -> None:
    job = golden_cases(spec)["command-source-dir"]
    env = render(job).native["Environment"]
    env.pop("TRAINCTL_PROVENANCE")
    assert env == {"HF_HOME": "/tmp/hf", "TRAINCTL_SECRET_WANDB_API_KEY": "prod/wandb#api_key"}
    assert "WANDB_API_KEY" not in env


def test_provenance_reaches_the_trainer_where_it_fits(spec: Any) -> None:
    """TRAINCTL_PROVENANCE (summary.json's record of what ran) is sent, but never instead of a job's own variable."""
    import json

    from trainctl.runs.provenance import provenance

    job = golden_cases(spec)["digits-sagemaker"]
    rendered = render(job)
    assert json.loads(rendered.native["Environment"]["TRAINCTL_PROVENANCE"]) == provenance(job, None).model_dump()
    assert not any(n.startswith("provenance:") for n in rendered.notes)
    full = job.model_copy(update={"env": {f"V{i}": "x" for i in range(100)}})
    rendered = render(full)
    assert "TRAINCTL_PROVENANCE" not in rendered.native["Environment"] and len(rendered.native["Environment"]) == 100
    assert any(n.startswith("provenance: TRAINCTL_PROVENANCE left out") for n in rendered.notes)


def test_source_dir_request(spec: Any) -> None:
    r = render(golden_cases(spec)["command-source-dir"]).native
    name = r["TrainingJobName"]
    code = f"s3://{spec.BUCKET}/output/{name}/source/sourcedir.tar.gz"
    assert r["InputDataConfig"][-1]["ChannelName"] == "code"
    assert r["InputDataConfig"][-1]["DataSource"]["S3DataSource"]["S3Uri"] == code
    hp = r["HyperParameters"]
    assert hp == {
        "epochs": '"3"',
        "run-name": '"demo"',
        "sagemaker_program": '"train.py"',
        "sagemaker_submit_directory": json.dumps(code),
        "sagemaker_torch_distributed_enabled": "true",
        "sagemaker_instance_type": '"ml.g5.12xlarge"',
    }
    assert r["VpcConfig"] == {"SecurityGroupIds": ["sg-0abc"], "Subnets": ["subnet-0abc"]}
    assert r["AlgorithmSpecification"]["ContainerArguments"] == [
        "--nproc-per-node", "4", "--max-restarts", "2", "--hang-quiet-for", "1200", "--hang-progress", r"^\[step \d+\]"
    ]  # fmt: skip
    assert {"Key": "team", "Value": "ml"} in r["Tags"]


def test_pytorchddp_keys_match_sdk_2x(spec: Any) -> None:
    hp = render(golden_cases(spec)["pytorchddp-dlc"]).native["HyperParameters"]
    assert hp["sagemaker_distributed_dataparallel_enabled"] == "true"
    assert hp["sagemaker_distributed_dataparallel_custom_mpi_options"] == '""'
    assert hp["sagemaker_instance_type"] == '"ml.p4d.24xlarge"'
    assert "sagemaker_torch_distributed_enabled" not in hp


def test_dlc_command_job_is_driven_as_the_sagemaker_sdk_drives_it(spec: Any) -> None:
    """Issue 14.2: the DLC's own entry point stays (no ContainerEntrypoint), the toolkit finds its script."""
    job = golden_cases(spec)["pytorchddp-dlc"]
    request = render(job).native
    assert "ContainerEntrypoint" not in request["AlgorithmSpecification"]
    assert "ContainerArguments" not in request["AlgorithmSpecification"]
    hp = {k: json.loads(v) for k, v in request["HyperParameters"].items()}
    name = request["TrainingJobName"]
    assert hp["sagemaker_program"] == "train.py" and hp["epochs"] == "3"
    assert hp["sagemaker_submit_directory"] == f"s3://{spec.BUCKET}/output/{name}/source/sourcedir.tar.gz"
    assert hp["sagemaker_region"] == "us-east-1" and hp["sagemaker_container_log_level"] == 20
    assert hp["sagemaker_job_name"] == name
    assert "trainctl_command" not in hp and "sagemaker_mpi_num_of_processes_per_host" not in hp
    assert "InputDataConfig" not in request  # the toolkit downloads the code itself; no `code` channel


def test_toolkit_images_refuse_what_they_cannot_run(spec: Any) -> None:
    dlc = "763104351884.dkr.ecr.us-east-1.amazonaws.com/pytorch-training:2.3.0-gpu-py311-cu121-ubuntu20.04-sagemaker"
    got = problems(spec.job_data(image=dlc))
    assert len(got) == 1 and got[0].startswith("trainer: the built-in trainer lives in trainctl's trainer image")
    got = problems(spec.job_data(image=dlc, trainer=None, command=["python", "-c", "print(1)"]))
    assert len(got) == 1 and got[0].startswith("sagemaker.source_dir: required: image")
    watched = spec.job_data(image=dlc, trainer=None, command=["python", "t.py"], hang={"quiet_for": "10m"},
                            sagemaker=spec.sagemaker_data(source_dir="src"))  # fmt: skip
    assert [p.split(":")[0] for p in problems(watched)] == ["hang"]  # the rule lives in trainctl's launcher
    # an image built FROM trainctl's says so, and runs the built-in trainer
    ours = spec.job_data(image=dlc, sagemaker=spec.sagemaker_data(container="trainctl"))
    assert render(prepare(Job.parse(ours))).native["AlgorithmSpecification"]["ContainerEntrypoint"] == ["train"]


# ---- names ----


def test_name_render_is_hash_and_submit_is_timestamp(spec: Any) -> None:
    job = prepare(Job.parse(spec.job_data()))
    assert req.training_job_name(job) == f"digits-{req.job_hash(job)}"
    now = datetime(2026, 11, 21, 12, 0, 5, tzinfo=timezone.utc)
    assert req.training_job_name(job, now) == "digits-20261121-120005"
    assert render(job, now=now).native["TrainingJobName"] == "digits-20261121-120005"
    other = prepare(Job.parse(spec.job_data(max_runtime="2h")))
    assert req.job_hash(other) != req.job_hash(job)


@pytest.mark.parametrize("length", [1, 30, 47, 48, 55, 62, 63])
def test_names_fit_sagemaker_limits(spec: Any, length: int) -> None:
    name = ("a" + "b-" * 40)[:length].rstrip("-")
    job = prepare(Job.parse(spec.job_data(name)))
    for made in (req.training_job_name(job), req.training_job_name(job, datetime(2026, 1, 2, 3, 4, 5))):
        assert len(made) <= 63 and NAME_PATTERN.match(made), made
        assert made.startswith(name[: min(len(name), 20)].rstrip("-"))


# ---- hyperparameters ----


def test_hyperparameter_encoding_is_the_sdk_form() -> None:
    encoded = req.encode_hyperparameters({"a": 3, "b": "x", "c": True, "d": {"k": [1, 2]}, "e": 0.5, "f": ["p", "q"]})
    assert encoded == {"a": "3", "b": '"x"', "c": "true", "d": '{"k": [1, 2]}', "e": "0.5", "f": '["p", "q"]'}


def test_launcher_decodes_to_the_trainers_flags(spec: Any) -> None:
    """The image's own decoder turns our hyperparameters back into exactly the trainer flags other targets use."""
    from trainctl.targets.program import as_flags, trainer_settings
    from trainer.launcher.sagemaker import files as image_side

    job = prepare(
        Job.parse(
            spec.job_data(trainer={"model": "digits", "model_args": {"hidden": 64}, "streaming": True, "lr": 0.01})
        )
    )
    hp = render(job).native["HyperParameters"]
    decoded = {k: image_side.decode_value(v) for k, v in hp.items()}
    flags = image_side.hyperparameter_flags(decoded, ("sagemaker_", "trainctl_"))
    settings = trainer_settings(
        job, data_paths=req.data_paths(job), checkpoint_dir=req.CHECKPOINT_DIR, output_dir=req.MODEL_DIR
    )
    expected = as_flags(dict(sorted(settings.items())))
    assert flags == expected


# ---- validation: one test per rule ----


def test_valid_job_renders(spec: Any) -> None:
    assert render(prepare(Job.parse(spec.job_data()))).native["RoleArn"] == spec.ROLE_ARN


def test_required_fields(spec: Any) -> None:
    got = problems(spec.job_data(sagemaker={}))
    assert any(p.startswith("sagemaker.role_arn: required") for p in got)
    assert any(p.startswith("sagemaker.instance_type: required") for p in got)
    assert any(p.startswith("sagemaker.output_s3_uri: required") for p in got)


def test_output_dir_may_stand_for_output_s3_uri(spec: Any) -> None:
    data = spec.job_data(output_dir=f"s3://{spec.BUCKET}/out/", sagemaker=spec.sagemaker_data(output_s3_uri=None))
    assert render(prepare(Job.parse(data))).native["OutputDataConfig"] == {"S3OutputPath": f"s3://{spec.BUCKET}/out/"}


def test_unknown_instance_type(spec: Any) -> None:
    got = problems(spec.job_data(sagemaker=spec.sagemaker_data(instance_type="ml.g5.xlarg")))
    assert (
        got[0].startswith("sagemaker.instance_type: 'ml.g5.xlarg' is not a known")
        and 'did you mean "ml.g5.xlarge"' in got[0]
    )


def test_gpus_on_cpu_instance(spec: Any) -> None:
    got = problems(spec.job_data(sagemaker=spec.sagemaker_data(instance_type="ml.m5.xlarge")))
    assert any(p.startswith("resources.gpus_per_node: 1 asked, but ml.m5.xlarge has no GPU") for p in got)


def test_more_gpus_than_instance(spec: Any) -> None:
    got = problems(spec.job_data(resources={"nodes": 1, "gpus_per_node": 4}))
    assert any(p.startswith("resources.gpus_per_node: 4 asked, but ml.g5.xlarge has 1 GPU") for p in got)


def test_procs_fit_instance_gpus(spec: Any) -> None:
    got = problems(spec.job_data(resources={"nodes": 1, "procs_per_node": 2}))
    assert any(p.startswith("resources.procs_per_node: 2 processes per node do not fit ml.g5.xlarge") for p in got)


def test_procs_fit_cpu_instance_vcpus(spec: Any) -> None:
    data = spec.job_data(
        resources={"nodes": 1, "procs_per_node": 8}, sagemaker=spec.sagemaker_data(instance_type="ml.m5.xlarge")
    )
    assert any(
        p.startswith("resources.procs_per_node: 8 processes per node do not fit ml.m5.xlarge (4 vCPUs)")
        for p in problems(data)
    )


def test_spot_needs_max_wait_at_least_runtime(spec: Any) -> None:
    got = problems(spec.job_data(spot=True, max_runtime="2h", sagemaker=spec.sagemaker_data(max_wait="1h")))
    assert got == [
        "sagemaker.max_wait: 3600s is less than max_runtime 7200s; managed spot needs max_wait >= max_runtime "
        "(the wait includes the run)"
    ]


def test_spot_without_max_wait_defaults_to_runtime(spec: Any) -> None:
    r = render(prepare(Job.parse(spec.job_data(spot=True))))
    assert r.native["StoppingCondition"] == {"MaxRuntimeInSeconds": 3600, "MaxWaitTimeInSeconds": 3600}
    assert any(n.startswith("spot: MaxWaitTimeInSeconds defaults") for n in r.notes)


def test_max_wait_without_spot(spec: Any) -> None:
    got = problems(spec.job_data(sagemaker=spec.sagemaker_data(max_wait="2h")))
    assert got == ["sagemaker.max_wait: only applies to managed spot training; set spot: true or remove it"]


@pytest.mark.parametrize(
    "role", ["trainctl-sagemaker", "arn:aws:iam::12345:role/x", "arn:aws:iam::123456789012:user/x"]
)
def test_role_must_be_full_arn(spec: Any, role: str) -> None:
    got = problems(spec.job_data(sagemaker=spec.sagemaker_data(role_arn=role)))
    assert len(got) == 1 and got[0].startswith(f"sagemaker.role_arn: got {role!r}; expected a full IAM role ARN")


def test_china_and_govcloud_role_arns_are_full(spec: Any) -> None:
    for partition in ("aws-cn", "aws-us-gov"):
        role = f"arn:{partition}:iam::123456789012:role/path/r"
        render(prepare(Job.parse(spec.job_data(sagemaker=spec.sagemaker_data(role_arn=role)))))


@pytest.mark.parametrize(
    ("changes", "field"),
    [
        ({"data": {"train": "pvc://vol/train"}}, "data.train"),
        ({"output_dir": "/tmp/out"}, "output_dir"),
        ({"checkpoint": {"dir": "/ckpt"}}, "checkpoint.dir"),
        ({"sagemaker": "output_s3_uri=gs://b/o"}, "sagemaker.output_s3_uri"),
        ({"sagemaker": "checkpoint_s3_uri=/local"}, "sagemaker.checkpoint_s3_uri"),
        ({"sagemaker": "code_s3_prefix=http://x/y"}, "sagemaker.code_s3_prefix"),
    ],
)
def test_every_uri_is_s3(spec: Any, changes: dict[str, Any], field: str) -> None:
    if changes.get("sagemaker"):
        key, value = changes.pop("sagemaker").split("=", 1)
        changes["sagemaker"] = spec.sagemaker_data(**{key: value})
    got = problems(spec.job_data(**changes))
    assert any(p.startswith(f"{field}: got ") and "s3://bucket/prefix" in p for p in got), got


def test_a_local_data_path_is_no_problem_submit_uploads_it(spec: Any) -> None:
    """A path here is uploaded at submit (tests/sagemaker/test_data_upload.py), so it is no s3:// problem."""
    render(prepare(Job.parse(spec.job_data(data={"train": "data/train.jsonl"}))))  # no JobError


def test_image_must_be_ecr(spec: Any) -> None:
    got = problems(spec.job_data(image="ghcr.io/trainctl/trainer:0.1.0"))
    assert got[0].startswith(
        "image: got 'ghcr.io/trainctl/trainer:0.1.0'; SageMaker pulls training images from Amazon ECR"
    )


def test_pytorchddp_needs_aws_pytorch_image(spec: Any) -> None:
    data = spec.job_data(sagemaker=spec.sagemaker_data(distribution="pytorchddp", instance_type="ml.p4d.24xlarge"))
    got = problems(data)
    assert len(got) == 1 and got[0].startswith(
        "sagemaker.distribution: pytorchddp is SageMaker's data-parallel library"
    )


def test_elastic_is_refused(spec: Any) -> None:
    got = problems(
        spec.job_data(resources={"nodes": 2, "gpus_per_node": 1, "elastic": {"min_nodes": 1, "max_nodes": 2}})
    )
    assert got[0].startswith("resources.elastic: SageMaker training jobs have a fixed instance count")


def test_runtime_and_retry_limits(spec: Any) -> None:
    assert problems(spec.job_data(max_runtime="29d"))[0].startswith(
        "max_runtime: 2505600s is more than SageMaker's 28 days"
    )
    assert problems(spec.job_data(retries=31)) == ["retries: 31; SageMaker's RetryStrategy allows at most 30"]


def test_vpc_needs_both(spec: Any) -> None:
    got = problems(spec.job_data(sagemaker=spec.sagemaker_data(subnets=["subnet-1"])))
    assert got == ["sagemaker.subnets / sagemaker.security_group_ids: a VpcConfig needs both, or neither"]


def test_env_value_limit(spec: Any) -> None:
    got = problems(spec.job_data(env={"BIG": "x" * 513}))
    assert got == ["env.BIG: 513 characters; SageMaker allows at most 512 per value"]


def test_long_command_hyperparameter(spec: Any) -> None:
    data = spec.job_data(trainer=None, command=["python", "-c", "x" * 2600])
    got = problems(data)
    assert got[0].startswith("command: encoded as a hyperparameter it is") and got[0].endswith("SageMaker allows 2500")


def test_source_dir_rules(spec: Any) -> None:
    trainer_job = spec.job_data(sagemaker=spec.sagemaker_data(source_dir="src"))
    assert problems(trainer_job) == [
        "sagemaker.source_dir: only for command jobs; trainer jobs run the trainer inside the image"
    ]
    base = {"trainer": None, "sagemaker": spec.sagemaker_data(source_dir="src")}
    assert problems(spec.job_data(command=["bash", "run.sh"], **base))[0].startswith(
        "command: with sagemaker.source_dir the command must be [python, SCRIPT, --key, value, ...]"
    )
    assert problems(spec.job_data(command=["python", "t.py", "pos"], **base)) == [
        "command: argument 'pos': SageMaker passes only --key value pairs to the script"
    ]
    assert problems(spec.job_data(command=["python", "t.py", "--flag"], **base)) == [
        "command: flag '--flag' has no value (SageMaker hyperparameters are key=value)"
    ]
    # keys pass as written (the toolkit's form, and so the launcher's): --lr_max reaches the script as --lr_max
    hp = render(prepare(Job.parse(spec.job_data(command=["python", "t.py", "--lr_max", "1"], **base)))).native[
        "HyperParameters"
    ]
    assert hp["lr_max"] == '"1"'
    assert problems(spec.job_data(command=["python", "../t.py"], **base)) == [
        "command: script '../t.py' must be a relative path inside sagemaker.source_dir"
    ]
    other = spec.sagemaker_data(source_dir="src", entry_point="main.py")
    assert problems(spec.job_data(trainer=None, command=["python", "t.py"], sagemaker=other)) == [
        "sagemaker.entry_point: 'main.py' differs from the command's script 't.py'"
    ]
    alone = spec.sagemaker_data(entry_point="main.py")
    assert problems(spec.job_data(trainer=None, command=["python", "t.py"], sagemaker=alone)) == [
        "sagemaker.entry_point: needs sagemaker.source_dir (the folder the script is in)"
    ]
    clash = spec.job_data(command=["python", "t.py"], data={"code": f"s3://{spec.BUCKET}/c/"}, **base)
    assert problems(clash) == ["data.code: the channel name 'code' carries sagemaker.source_dir; rename this input"]


def test_check_target_names_missing_section_fields(spec: Any) -> None:
    job = prepare(Job.parse(spec.job_data(sagemaker=None)))
    with pytest.raises(JobError) as info:
        job.check_target("sagemaker")
    assert info.value.problems == [
        "sagemaker.role_arn: required to submit to SageMaker",
        "sagemaker.instance_type: required to submit to SageMaker",
    ]


def test_max_wait_must_parse(spec: Any) -> None:
    with pytest.raises(JobError) as info:
        prepare(Job.parse(spec.job_data(spot=True, sagemaker=spec.sagemaker_data(max_wait="soon"))))
    assert info.value.problems[0].startswith("sagemaker.max_wait: got 'soon'")


# ---- notes ----


def test_cost_line(spec: Any) -> None:
    notes = render(prepare(Job.parse(spec.job_data()))).notes
    assert notes[0] == (
        "cost: 2 x ml.g5.xlarge at ~$1.41/h = ~$2.82/h on demand; at most ~$2.82 for MaxRuntimeInSeconds=3600 "
        "(approximate us-east-1 list prices)"
    )
    assert notes[1] == "instance: ml.g5.xlarge: 1 x A10G GPU, 4 vCPUs, 16 GiB"

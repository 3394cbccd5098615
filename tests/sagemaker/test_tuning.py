"""`strategy: bayesian` on SageMaker (issue 26): ONE CreateHyperParameterTuningJob request, derived from the one
CreateTrainingJob builder and checked against botocore's model, sent to the emulator, read back and stopped.

moto creates, describes and lists tuning jobs but runs no trial and lacks StopHyperParameterTuningJob and
ListTrainingJobsForHyperParameterTuningJob (conftest.MOTO_GAPS); here the tests play SageMaker's part and create
the trials' training jobs from the definition that was sent, with the values a search could pick."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import boto3
import botocore.session
import pytest
import yaml
from botocore.validate import validate_parameters
from trainctl.errors import JobError
from trainctl.job import Job
from trainctl.runs.store import RunStore
from trainctl.spec.sweep import parse
from trainctl.sweeps import search
from trainctl.sweeps.handle import Sweep
from trainctl.targets.lookup import get_target
from trainctl.targets.sagemaker.tuning import ALGORITHM_DROPPED, DROPPED

GOLDEN = Path(__file__).resolve().parents[1] / "golden" / "sagemaker"
TRAINCTL = str(Path(sys.executable).parent / "trainctl")
MODEL = botocore.session.get_session().get_service_model("sagemaker")
SPACE: dict[str, Any] = {
    "strategy": "bayesian",
    "grid": {"trainer.batch_size": [32, 64]},
    "random": {"trainer.lr": "loguniform(1e-4, 1e-2)", "trainer.epochs": "randint(1, 5)"},
    "trials": 8,
    "parallel": 2,
    "seed": 7,
    "metric": "val_accuracy",
    "early_stopping": {"after_step": 20},
}


def _rendered(spec: Any, **space: Any) -> dict[str, Any]:
    native: dict[str, Any] = search.render(
        Job.parse(spec.job_data("swp")), parse({**SPACE, **space}), "sagemaker"
    ).native
    return native


def test_the_tuning_request_is_one_botocore_accepts_and_is_golden(
    spec: Any, golden: Callable[[Path, str], None]
) -> None:
    rendered = search.render(Job.parse(spec.job_data("swp")), parse(SPACE), "sagemaker")
    validate_parameters(rendered.native, MODEL.operation_model("CreateHyperParameterTuningJob").input_shape)
    golden(GOLDEN / "tuning-bayesian.json", rendered.text)
    config = rendered.native["HyperParameterTuningJobConfig"]
    assert config["Strategy"] == "Bayesian" and config["RandomSeed"] == 7
    assert config["ResourceLimits"] == {"MaxNumberOfTrainingJobs": 8, "MaxParallelTrainingJobs": 2}
    assert config["HyperParameterTuningJobObjective"] == {"Type": "Maximize", "MetricName": "validation:accuracy"}
    assert config["TrainingJobEarlyStoppingType"] == "Auto"
    ranges = config["ParameterRanges"]
    assert ranges["ContinuousParameterRanges"] == [
        {"Name": "lr", "MinValue": "0.0001", "MaxValue": "0.01", "ScalingType": "Logarithmic"}
    ]
    assert ranges["IntegerParameterRanges"] == [
        {"Name": "epochs", "MinValue": "1", "MaxValue": "5", "ScalingType": "Linear"}
    ]
    assert ranges["CategoricalParameterRanges"] == [{"Name": "batch_size", "Values": ["32", "64"]}]
    names = [r["Name"] for group in ranges.values() for r in group]
    metrics = [
        m["Name"] for m in rendered.native["TrainingJobDefinition"]["AlgorithmSpecification"]["MetricDefinitions"]
    ]
    assert config["HyperParameterTuningJobObjective"]["MetricName"] in metrics
    assert not set(names) & set(rendered.native["TrainingJobDefinition"]["StaticHyperParameters"])


def test_the_definition_is_the_training_request_less_what_its_shape_lacks(spec: Any) -> None:
    """Every member of the CreateTrainingJob request is carried unchanged or named in DROPPED, and what DROPPED
    says the definition has no member for, botocore's HyperParameterTrainingJobDefinition indeed lacks."""
    job = Job.parse(spec.job_data("swp", trainer={"model": "digits", "lr": 0.003, "batch_size": 48, "epochs": 2}))
    training = get_target("sagemaker").render(job).native
    definition = search.render(job, parse({**SPACE, "grid": {}}), "sagemaker").native["TrainingJobDefinition"]
    shape = MODEL.shape_for("HyperParameterTrainingJobDefinition").members
    algorithm_shape = MODEL.shape_for("HyperParameterAlgorithmSpecification").members
    for key, value in training.items():
        if key == "HyperParameters":
            tuned = {"lr", "epochs"}
            assert definition["StaticHyperParameters"] == {k: v for k, v in value.items() if k not in tuned}
        elif key == "AlgorithmSpecification":
            assert definition[key] == {k: v for k, v in value.items() if k not in ALGORITHM_DROPPED}
            assert not set(ALGORITHM_DROPPED) & set(algorithm_shape)
        elif key in DROPPED:
            assert key not in definition
        else:
            assert definition[key] == value, key
    assert {"TrainingJobName", "Tags", "TensorBoardOutputConfig"}.isdisjoint(shape)


@pytest.mark.parametrize(
    ("space", "named"),
    [
        ({"grid": {"resources.nodes": [1, 2]}}, "resources.nodes: SageMaker tunes hyperparameters only"),
        ({"grid": {"trainer.batch_size": [32, 0]}}, "trainer.batch_size=0: trainer.batch_size: got 0"),
        ({"metric": "val_f1"}, "sweep.metric: 'val_f1' is not one the training job reports"),
    ],
)
def test_what_cannot_be_tuned_is_refused_naming_it(spec: Any, space: dict[str, Any], named: str) -> None:
    with pytest.raises(JobError) as caught:
        _rendered(spec, **space)
    assert named in " ".join(str(caught.value).split())


def test_launcher_options_a_trial_would_lose_are_refused(spec: Any) -> None:
    data = spec.job_data("swp", resources={"nodes": 1, "gpus_per_node": 1, "max_restarts": 2})
    with pytest.raises(JobError, match="has no ContainerArguments"):
        search.render(Job.parse(data), parse(SPACE), "sagemaker")


def test_bayesian_elsewhere_exits_2_naming_sagemaker(spec: Any, tmp_path: Path) -> None:
    data = spec.job_data("swp")
    data.pop("sagemaker")
    job_file = tmp_path / "swp.yaml"
    job_file.write_text(yaml.safe_dump(data))
    args = ["--strategy", "bayesian", "--random", "trainer.lr=loguniform(1e-4,1e-2)", "--trials", "4"]
    proc = subprocess.run(
        [TRAINCTL, "sweep", str(job_file), *args, "--target", "local"], capture_output=True, text=True
    )
    assert proc.returncode == 2, proc.stderr
    assert "SageMaker HyperParameterTuningJob (--target sagemaker)" in " ".join(proc.stderr.split()), proc.stderr


def test_the_dry_run_shows_the_request(spec: Any, tmp_path: Path) -> None:
    job_file = tmp_path / "swp.yaml"
    job_file.write_text(yaml.safe_dump({**spec.job_data("swp"), "sweep": SPACE}))
    proc = subprocess.run(
        [TRAINCTL, "sweep", str(job_file), "-t", "sagemaker", "--dry-run"], capture_output=True, text=True
    )
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout) == _rendered(spec)
    assert "left out of the trials' definition: CheckpointConfig" in proc.stderr
    assert "after_step 20 and min_trials 2 have no counterpart" in " ".join(proc.stderr.split())
    rendered = subprocess.run([TRAINCTL, "render", str(job_file), "-t", "sagemaker"], capture_output=True, text=True)
    assert rendered.returncode == 0 and "TrainingJobName" in json.loads(rendered.stdout), rendered.stderr
    assert "--dry-run` shows what its sweep: section sends" in " ".join(rendered.stderr.split())


def _play_sagemaker(spec: Any, client: Any, name: str, picks: list[dict[str, str]]) -> list[str]:
    """Create the tuning job's training jobs as SageMaker would: from the definition sent, with picked values."""
    definition = client.describe_hyper_parameter_tuning_job(HyperParameterTuningJobName=name)["TrainingJobDefinition"]
    names = []
    for number, picked in enumerate(picks, 1):
        trial = spec.tuning_trial_name(name, number)
        client.create_training_job(
            TrainingJobName=trial,
            HyperParameters={**definition["StaticHyperParameters"], **picked},
            **{k: definition[k] for k in ("AlgorithmSpecification", "RoleArn", "InputDataConfig", "OutputDataConfig",
                                          "ResourceConfig", "StoppingCondition")},
        )  # fmt: skip
        names.append(trial)
    return names


def _backend(spec: Any) -> Any:
    from moto.sagemaker.models import sagemaker_backends

    return sagemaker_backends[spec.ACCOUNT][spec.REGION]


def test_a_bayesian_sweep_is_one_tuning_job_whose_trials_status_lists_best_first(spec: Any, aws: str) -> None:
    job = Job.parse(spec.job_data("swp"))
    space = {k: v for k, v in SPACE.items() if k not in ("strategy", "early_stopping")}
    sweep = job.sweep("sagemaker", strategy="bayesian", **{**space, "random": {"trainer.lr": "loguniform(1e-4,1e-2)"}})
    assert sweep.record.search is not None
    name = sweep.record.search["name"]
    client = boto3.client("sagemaker", region_name=spec.REGION)
    described = client.describe_hyper_parameter_tuning_job(HyperParameterTuningJobName=name)
    sent = {
        k: described[k]
        for k in ("HyperParameterTuningJobName", "HyperParameterTuningJobConfig", "TrainingJobDefinition")
    }
    validate_parameters(sent, MODEL.operation_model("CreateHyperParameterTuningJob").input_shape)
    assert described["HyperParameterTuningJobConfig"]["ResourceLimits"]["MaxParallelTrainingJobs"] == 2
    listed = client.list_hyper_parameter_tuning_jobs()["HyperParameterTuningJobSummaries"]
    assert [s["Strategy"] for s in listed if s["HyperParameterTuningJobName"] == name] == ["Bayesian"]

    picks = [{"lr": "0.0005", "batch_size": "32"}, {"lr": "0.003", "batch_size": "64"}]
    trials = _play_sagemaker(spec, client, name, picks)
    for trial, accuracy in zip(trials, (0.81, 0.93), strict=True):  # what the objective's regex read from the log
        _backend(spec).training_jobs[trial].final_metric_data_list = [
            {"MetricName": "validation:accuracy", "Value": accuracy}
        ]
    proc = subprocess.run([TRAINCTL, "sweep", "status", sweep.id, "--output", "json"], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    rows = json.loads(proc.stdout)["trials"]
    assert [(r["run_id"], r["params"], r["metric"], r["state"]) for r in rows] == [
        (f"sagemaker:{trials[1]}", {"trainer.batch_size": 64, "trainer.lr": 0.003}, 0.93, "succeeded"),
        (f"sagemaker:{trials[0]}", {"trainer.batch_size": 32, "trainer.lr": 0.0005}, 0.81, "succeeded"),
    ]
    text = subprocess.run([TRAINCTL, "sweep", "status", sweep.id], capture_output=True, text=True)
    assert "best: trial 1 (trainer.batch_size=64 trainer.lr=0.003): val_accuracy 0.9300" in text.stdout, text.stderr
    assert sweep.wait(timeout=30, poll=0.2)  # moto's tuning job is Completed at once: the sweep has ended
    recorded = {r.run.id: r for r in RunStore().list(target="sagemaker")}  # each trial is a run of the sweep
    assert {f"sagemaker:{t}" for t in trials} <= set(recorded)
    assert all(recorded[f"sagemaker:{t}"].run.sweep_id == sweep.id for t in trials)
    shown = subprocess.run(
        [TRAINCTL, "status", f"sagemaker:{trials[1]}", "--output", "json"], capture_output=True, text=True
    )
    assert shown.returncode == 0 and json.loads(shown.stdout)["state"] == "succeeded", shown.stdout + shown.stderr


def test_cancel_stops_the_tuning_job_and_its_running_trials(spec: Any, aws: str, tmp_path: Path) -> None:
    job_file = tmp_path / "swp.yaml"
    job_file.write_text(yaml.safe_dump(spec.job_data("swp")))
    args = [
        "--strategy",
        "bayesian",
        "--random",
        "trainer.lr=loguniform(1e-4,1e-2)",
        "--trials",
        "3",
        "-t",
        "sagemaker",
    ]
    proc = subprocess.run([TRAINCTL, "sweep", str(job_file), *args], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert " as tuning job swp-" in proc.stdout and ": 3 trials on sagemaker, 1 at once" in proc.stdout, proc.stdout
    sweep = Sweep.from_id(proc.stdout.split()[1].rstrip(":"))
    assert sweep.record.search is not None
    name = sweep.record.search["name"]
    client = boto3.client("sagemaker", region_name=spec.REGION)
    _backend(spec).hyper_parameter_tuning_jobs[
        name
    ].hyper_parameter_tuning_job_status = "InProgress"  # as a real one is
    (trial,) = _play_sagemaker(spec, client, name, [{"lr": "0.001"}])
    spec.mark_in_progress(trial)
    assert [r.state for r in sweep.rows()] == ["running"] and not sweep.finished
    proc = subprocess.run([TRAINCTL, "cancel", sweep.id], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    described = client.describe_hyper_parameter_tuning_job(HyperParameterTuningJobName=name)
    assert described["HyperParameterTuningJobStatus"] == "Stopped"
    assert [r.state for r in sweep.rows()] == ["cancelled"] and sweep.finished

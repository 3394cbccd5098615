"""Fixtures for the SageMaker target: an AWS API emulator (moto) over real HTTP, a guard that fails any
test whose code connects anywhere but 127.0.0.1, and client-side capture of the requests as sent."""

from __future__ import annotations

import json
import os
import re
import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
REGION = "us-east-1"
ACCOUNT = "123456789012"
BUCKET = "trainctl-test"
ROLE_ARN = f"arn:aws:iam::{ACCOUNT}:role/trainctl-sagemaker"
IMAGE = f"{ACCOUNT}.dkr.ecr.{REGION}.amazonaws.com/trainctl-trainer:0.1.0"
ALLOWED_HOSTS = {"127.0.0.1", "localhost"}


class SocketGuard:
    """Records every attempt to resolve or connect to a host other than 127.0.0.1, and refuses it.

    Recorded, not only refused: the SageMaker SDK swallows errors from its telemetry call, so the test
    must fail on the attempt itself.
    """

    def __init__(self) -> None:
        self.violations: list[str] = []

    def check(self, what: str, host: Any) -> None:
        if isinstance(host, bytes):
            host = host.decode()
        if host not in ALLOWED_HOSTS:
            self.violations.append(f"{what} {host!r}")
            raise OSError(f"tests/sagemaker socket guard: {what} {host!r} refused (only 127.0.0.1 allowed)")


@pytest.fixture(autouse=True)
def socket_guard(monkeypatch: pytest.MonkeyPatch) -> Iterator[SocketGuard]:
    guard = SocketGuard()
    real_connect = socket.socket.connect
    real_getaddrinfo = socket.getaddrinfo

    def connect(self: socket.socket, address: Any) -> Any:
        if self.family in (socket.AF_INET, socket.AF_INET6):
            guard.check("connect to", address[0])
        return real_connect(self, address)

    def getaddrinfo(host: Any, *args: Any, **kwargs: Any) -> Any:
        if host is not None:
            guard.check("resolve", host)
        return real_getaddrinfo(host, *args, **kwargs)

    monkeypatch.setattr(socket.socket, "connect", connect)
    monkeypatch.setattr(socket, "getaddrinfo", getaddrinfo)
    yield guard
    assert not guard.violations, f"network access outside 127.0.0.1: {guard.violations}"


@pytest.fixture(scope="module")
def docker_host(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """`podman system service` on a private socket, for the `docker` client and docker-compose."""
    if not (shutil.which("podman") and shutil.which("docker-compose") and shutil.which("docker")):
        pytest.fail("podman, docker and docker-compose are needed: run scripts/setup-containers.sh")
    sock = tmp_path_factory.mktemp("podman") / "podman.sock"
    service = subprocess.Popen(["podman", "system", "service", "--time=0", f"unix://{sock}"])
    deadline = time.monotonic() + 30
    while not sock.exists():
        assert service.poll() is None, "podman system service exited"
        assert time.monotonic() < deadline, "podman system service did not open its socket in 30 s"
        time.sleep(0.2)
    yield f"unix://{sock}"
    # The SDK leaves exited containers behind when a job fails; the network is created again next time.
    left = subprocess.run(
        ["podman", "ps", "-aq", "--filter", "network=sagemaker-local"], capture_output=True, text=True
    ).stdout.split()
    if left:
        subprocess.run(["podman", "rm", "-f", *left], capture_output=True)
    service.terminate()
    service.wait(timeout=30)


MOTO_GAPS = {
    "StopTrainingJob": "moto's SageMakerResponse (moto/sagemaker/responses.py) has no stop_training_job, so its "
    "server answers the call with an HTTP 500 page (BaseResponse.call_action: NotImplementedError); "
    "added to the in-process server by moto_endpoint (_stop_training_job)",
    "StopHyperParameterTuningJob": "moto's SageMakerResponse has create/describe/list/delete_hyper_parameter_tuning_job "
    "but no stop_hyper_parameter_tuning_job (HTTP 500, as StopTrainingJob); added by moto_endpoint (_stop_tuning_job)",
    "ListTrainingJobsForHyperParameterTuningJob": "moto has no list_training_jobs_for_hyper_parameter_tuning_job, and "
    "its HyperParameterTuningJob (moto/sagemaker/models.py) runs no training job: it is Completed the moment it is "
    "created, with a made-up BestTrainingJob. Added by moto_endpoint (_list_tuning_trials) over the training jobs moto "
    "has that are named as SageMaker names a tuning job's (the tests create them, playing SageMaker's part)",
    "DescribeTrainingJob Environment": "moto's FakeTrainingJob keeps no Environment, so a test that plays the host "
    "from DescribeTrainingJob (tests/sagemaker/test_function.py) rebuilds it from what the run recorded",
    "iam:SimulatePrincipalPolicy": "SDK 3 checks the role with it before it submits and moto answers HTTP 500; "
    "the SDK 3 tests set SAGEMAKER_VALIDATE_ROLE=false, the SDK's own switch",
}
"""The AWS calls trainctl or the SageMaker SDKs make that moto lacks, and how the tests fill each gap. Production
code knows nothing of the emulator; these are the only places the tests paper over it."""


def _stop_training_job(self: Any) -> Any:
    """StopTrainingJob for moto, the way moto stops a processing job (moto/sagemaker/models.py
    SageMakerModelBackend.stop_processing_job): a known job ends Stopped (TrainingJobStatus and SecondaryStatus,
    SageMaker's values once a stop has run), an unknown name is a ValidationException (describe_training_job's)."""
    from moto.core.responses import EmptyResult

    name = self._get_param("TrainingJobName")
    self.sagemaker_backend.describe_training_job(name)  # ValidationException when there is none
    job = self.sagemaker_backend.training_jobs[name]
    job.training_job_status = job.secondary_status = "Stopped"
    return EmptyResult()


def tuning_trial_name(tuning_job: str, number: int) -> str:
    """How SageMaker names a tuning job's training jobs: `<tuning job>-<NNN>-<8 hex>` (e.g. the AWS console's
    `xgboost-tuningjob-001-1f3e5b6d`)."""
    return f"{tuning_job}-{number:03d}-{number:08x}"


def _tuning_trials(backend: Any, name: str) -> list[Any]:
    return [
        job
        for key, job in backend.training_jobs.items()
        if re.fullmatch(rf"{re.escape(name)}-\d{{3}}-[0-9a-f]{{8}}", key)
    ]


def _stop_tuning_job(self: Any) -> Any:
    """StopHyperParameterTuningJob for moto, the way moto stops a processing job (SageMakerModelBackend.
    stop_processing_job): a known tuning job ends Stopped and so does each of its training jobs still running, as
    SageMaker's API reference says of the call; an unknown name is describe_hyper_parameter_tuning_job's error."""
    from moto.core.responses import EmptyResult

    name = self._get_param("HyperParameterTuningJobName")
    self.sagemaker_backend.describe_hyper_parameter_tuning_job(name)
    self.sagemaker_backend.hyper_parameter_tuning_jobs[name].hyper_parameter_tuning_job_status = "Stopped"
    for job in _tuning_trials(self.sagemaker_backend, name):
        if job.training_job_status == "InProgress":
            job.training_job_status = job.secondary_status = "Stopped"
    return EmptyResult()


def _list_tuning_trials(self: Any) -> Any:
    """ListTrainingJobsForHyperParameterTuningJob for moto: its training jobs named as SageMaker names a tuning job's,
    each a HyperParameterTrainingJobSummary (botocore's model): TunedHyperParameters are its hyperparameters that
    the tuning job's ParameterRanges name; the objective is its FinalMetricDataList value of the objective's metric."""
    from moto.core.responses import ActionResult

    name = self._get_param("HyperParameterTuningJobName")
    self.sagemaker_backend.describe_hyper_parameter_tuning_job(name)
    config = self.sagemaker_backend.hyper_parameter_tuning_jobs[name].hyper_parameter_tuning_job_config
    tuned = {r["Name"] for group in config["ParameterRanges"].values() for r in group}
    objective = config["HyperParameterTuningJobObjective"]
    summaries = []
    for job in _tuning_trials(self.sagemaker_backend, name):
        summary = {
            "TrainingJobName": job.training_job_name, "TrainingJobArn": job.arn, "TuningJobName": name,
            "CreationTime": job.creation_time, "TrainingJobStatus": job.training_job_status,
            "TunedHyperParameters": {k: v for k, v in job.hyper_parameters.items() if k in tuned},
        }  # fmt: skip
        values = [m["Value"] for m in job.final_metric_data_list if m.get("MetricName") == objective["MetricName"]]
        if values:
            summary["FinalHyperParameterTuningJobObjectiveMetric"] = {**objective, "Value": values[-1]}
        summaries.append(summary)
    return ActionResult({"TrainingJobSummaries": summaries})


@pytest.fixture(scope="session")
def moto_endpoint() -> Iterator[str]:
    """moto's server in this process, on 127.0.0.1, with MOTO_GAPS' SageMaker calls filled in."""
    from moto.sagemaker.responses import SageMakerResponse
    from moto.server import ThreadedMotoServer

    gaps = {
        "stop_training_job": _stop_training_job,
        "stop_hyper_parameter_tuning_job": _stop_tuning_job,
        "list_training_jobs_for_hyper_parameter_tuning_job": _list_tuning_trials,
    }
    for method in gaps:
        assert not hasattr(SageMakerResponse, method), f"moto has {method} now: drop the stand-in"
    with pytest.MonkeyPatch.context() as patch:
        for method, stand_in in gaps.items():
            patch.setattr(SageMakerResponse, method, stand_in, raising=False)
        server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
        server.start()
        host, port = server.get_host_and_port()
        yield f"http://{host}:{port}"
        server.stop()


def mark_in_progress(name: str) -> None:
    """moto completes a training job at once; put it back InProgress/Training, as a running one is, to stop it."""
    from moto.sagemaker.models import sagemaker_backends

    job = sagemaker_backends[ACCOUNT][REGION].training_jobs[name]
    job.training_job_status, job.secondary_status = "InProgress", "Training"


@pytest.fixture(scope="session")
def moto_resources(moto_endpoint: str) -> str:
    """The bucket and role, created once per session (explicit endpoint and keys: no env needed yet)."""
    import boto3

    session = boto3.Session(aws_access_key_id="testing", aws_secret_access_key="testing", region_name=REGION)
    session.client("s3", endpoint_url=moto_endpoint).create_bucket(Bucket=BUCKET)
    iam = session.client("iam", endpoint_url=moto_endpoint)
    iam.create_role(RoleName="trainctl-sagemaker", AssumeRolePolicyDocument="{}")
    return moto_endpoint


@pytest.fixture
def aws(moto_resources: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> str:
    """Fake credentials, the emulator as every AWS endpoint, a bucket and a role there; TRAINCTL_HOME in tmp."""
    empty = tmp_path / "aws-empty"
    empty.write_text("")
    for key in list(os.environ):
        if key.startswith("AWS_"):
            monkeypatch.delenv(key)
    env = {
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_DEFAULT_REGION": REGION,
        "AWS_EC2_METADATA_DISABLED": "true",
        "AWS_ENDPOINT_URL": moto_resources,
        "AWS_CONFIG_FILE": str(empty),
        "AWS_SHARED_CREDENTIALS_FILE": str(empty),
        "TRAINCTL_HOME": str(tmp_path / "trainctl-home"),
        "SAGEMAKER_SUPPRESS_V2_WARNING": "1",
        "HOME": str(tmp_path),
    }
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    return moto_resources


class Capture:
    """A boto3 session whose clients record the parameters of every call, as the caller passed them."""

    def __init__(self) -> None:
        import boto3

        self.session = boto3.Session(region_name=REGION)
        self.calls: list[tuple[str, dict[str, Any]]] = []
        self.session.events.register("provide-client-params.*.*", self._record)

    def _record(self, params: dict[str, Any], event_name: str, **_: Any) -> None:
        # JSON round trip, not deepcopy: S3 uploads pass file objects with locks inside.
        self.calls.append((event_name.split(".", 2)[2], json.loads(json.dumps(params, default=repr))))

    def only(self, operation: str) -> dict[str, Any]:
        found = [p for op, p in self.calls if op == operation]
        assert len(found) == 1, f"expected one {operation}, got {[op for op, _ in self.calls]}"
        return found[0]


@pytest.fixture
def capture(aws: str) -> Capture:
    return Capture()


def job_data(name: str = "digits", **changes: Any) -> dict[str, Any]:
    """A valid SageMaker trainer job as plain data; `changes` replace top-level keys."""
    data: dict[str, Any] = {
        "name": name,
        "image": IMAGE,
        "trainer": {"model": "digits", "batch_size": 32, "epochs": 2, "lr": 0.003},
        "resources": {"nodes": 2, "gpus_per_node": 1},
        "data": {"train": f"s3://{BUCKET}/digits/train/", "val": f"s3://{BUCKET}/digits/val/"},
        "max_runtime": "1h",
        "sagemaker": {
            "role_arn": ROLE_ARN,
            "instance_type": "ml.g5.xlarge",
            "region": REGION,
            "output_s3_uri": f"s3://{BUCKET}/output/",
        },
    }
    data.update(changes)
    return data


def sagemaker_data(**changes: Any) -> dict[str, Any]:
    base = job_data()["sagemaker"]
    base.update(changes)
    return base


SM3_PYTHON = REPO / ".venv-sm3" / "bin" / "python"
SM3_DRIVER = Path(__file__).with_name("sm3_driver.py")


COMPOSE_LOG_RACE = "'NoneType' object has no attribute 'log_stream'"
"""Local mode's `docker-compose up` (Debian's 1.29.2) failing in its own log printer, once in CI under load:
compose/cli/log_printer.py `watch_events` starts a new log thread on a container's `start` event when the first
thread has already ended (the container printed and exited), with the event's `container`, which
compose/project.py `build_container_event` leaves None when inspecting the container fails; `build_log_generator`
then raises AttributeError ('NoneType' object has no attribute 'log_stream') and `up` exits 1. That is the
compose client's race against podman's late events, not the job's: `run_sdk3` runs the driver again, once."""


def run_sdk3(job: dict[str, Any], tmp_path: Path, mode: str, *args: str, **env: str) -> dict[str, Any]:
    """sm3_driver.py in .venv-sm3 (SageMaker SDK 3) on `job`: its JSON line, checked for exit 0 and no outside
    connection. SAGEMAKER_VALIDATE_ROLE=false is MOTO_GAPS' iam:SimulatePrincipalPolicy; trainctl leaves it on."""
    assert SM3_PYTHON.exists(), "the SDK 3.x venv is missing: run scripts/setup.sh (it makes .venv-sm3)"
    job_file = tmp_path / f"{job['name']}.sdk3.yaml"
    job_file.write_text(yaml.safe_dump(job))
    full_env = {**os.environ, "HOME": str(tmp_path), "SAGEMAKER_VALIDATE_ROLE": "false", **env}
    argv = [str(SM3_PYTHON), str(SM3_DRIVER), str(job_file), mode, *args]
    done = subprocess.run(argv, env=full_env, capture_output=True, text=True, timeout=600)
    if done.returncode != 0 and COMPOSE_LOG_RACE in done.stderr and "compose/cli/log_printer.py" in done.stderr:
        done = subprocess.run(argv, env=full_env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-4000:]
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["violations"] == [], result["violations"]
    return result


def finish(run: Any, timeout: float = 600) -> str:
    """Poll a (local-mode) run until it ends; its log, after asserting it succeeded."""
    from trainctl import RunState

    deadline = time.monotonic() + timeout
    while not (st := run.status()).state.finished:
        assert time.monotonic() < deadline, "\n".join(run.logs())[-3000:]
        time.sleep(1)
    log = "\n".join(run.logs())
    assert st.state is RunState.SUCCEEDED, log[-4000:]
    return log


class Spec:
    """Constants and job builders for the tests (fixtures, since test modules cannot import conftest)."""

    REGION = REGION
    ACCOUNT = ACCOUNT
    BUCKET = BUCKET
    ROLE_ARN = ROLE_ARN
    IMAGE = IMAGE
    REPO = REPO
    job_data = staticmethod(job_data)
    sagemaker_data = staticmethod(sagemaker_data)
    mark_in_progress = staticmethod(mark_in_progress)
    tuning_trial_name = staticmethod(tuning_trial_name)
    run_sdk3 = staticmethod(run_sdk3)
    finish = staticmethod(finish)


@pytest.fixture
def spec() -> type[Spec]:
    return Spec

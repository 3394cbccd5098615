"""The direct path against moto over HTTP: the request as sent, the source tarball in S3, status, logs, cancel."""

from __future__ import annotations

import contextlib
import io
import json
import os
import re
import subprocess
import sys
import tarfile
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pytest
from trainctl.errors import EngineError, JobError
from trainctl.job import Job
from trainctl.run import Run, RunState
from trainctl.spec.code import Code
from trainctl.submit.bundle import pack
from trainctl.targets.sagemaker import engine as target
from trainctl.targets.sagemaker.handle import SageMakerHandle
from trainctl.targets.sagemaker.render import render

NOW = datetime(2026, 11, 21, 12, 0, 0, tzinfo=timezone.utc)


def _source_dir(root: Path) -> Path:
    src = root / "src"
    (src / "pkg" / "__pycache__").mkdir(parents=True)
    (src / "train.py").write_text("import sys\nprint(sys.argv)\n")
    (src / "pkg" / "__init__.py").write_text("VALUE = 1\n")
    (src / "pkg" / "__pycache__" / "x.cpython-311.pyc").write_bytes(b"junk")
    (src / "stale.pyc").write_bytes(b"junk")
    return src


def test_submit_sends_the_rendered_request(spec: Any, capture: Any) -> None:
    job = Job.parse(spec.job_data("direct-request"))
    run = target.submit(job, now=NOW, boto_session=capture.session)
    sent = capture.only("CreateTrainingJob")
    token = run.native_id.rsplit("-", 1)[1]
    assert re.fullmatch("[0-9a-f]{4}", token)
    assert sent == render(job, now=NOW, token=token).native
    assert run.id == f"sagemaker:direct-request-20261121-120000-{token}"
    assert run.handle.model_dump(exclude_defaults=True) == {
        "region": spec.REGION,
        "via": "direct",
        "log_group": "/aws/sagemaker/TrainingJobs",
    }
    assert run.paths.checkpoint_dir == sent["CheckpointConfig"]["S3Uri"]  # where --resume-from fetches from
    assert sent["CheckpointConfig"]["S3Uri"] == f"s3://{spec.BUCKET}/output/{run.native_id}/checkpoints/"
    desc = capture.session.client("sagemaker").describe_training_job(TrainingJobName=run.native_id)
    assert desc["AlgorithmSpecification"]["ContainerEntrypoint"] == ["train"]
    assert desc["HyperParameters"] == sent["HyperParameters"]
    assert desc["RoleArn"] == spec.ROLE_ARN


def test_source_dir_tarball_in_s3(spec: Any, capture: Any, tmp_path: Path) -> None:
    src = _source_dir(tmp_path)
    data = spec.job_data(
        "with-code",
        trainer=None,
        command=["python", "train.py", "--epochs", "3"],
        sagemaker=spec.sagemaker_data(source_dir=str(src)),
    )
    job = Job.parse(data)
    run = target.submit(job, now=NOW, boto_session=capture.session)
    sent = capture.only("CreateTrainingJob")
    code_uri = f"s3://{spec.BUCKET}/output/{run.native_id}/source/sourcedir.tar.gz"
    assert json.loads(sent["HyperParameters"]["sagemaker_submit_directory"]) == code_uri
    assert sent["InputDataConfig"][-1]["DataSource"]["S3DataSource"]["S3Uri"] == code_uri
    body = capture.session.client("s3").get_object(Bucket=spec.BUCKET, Key=code_uri.split("/", 3)[3])["Body"].read()
    assert body == pack(src, Code(dir=str(src))).data, "the uploaded tarball is the code's deterministic bundle"
    with tarfile.open(fileobj=io.BytesIO(body)) as tar:
        members = {m.name: m for m in tar.getmembers()}
        assert sorted(members) == ["pkg/__init__.py", "train.py"]
        assert all(m.mtime == 0 and m.uid == 0 for m in members.values())
        extracted = tar.extractfile("train.py")
        assert extracted is not None and extracted.read() == b"import sys\nprint(sys.argv)\n"


def test_missing_source_dir_is_a_job_error(spec: Any, capture: Any, tmp_path: Path) -> None:
    data = spec.job_data(
        "no-code",
        trainer=None,
        command=["python", "t.py"],
        sagemaker=spec.sagemaker_data(source_dir=str(tmp_path / "nope")),
    )
    with pytest.raises(Exception) as info:
        target.submit(Job.parse(data), now=NOW, boto_session=capture.session)
    assert "sagemaker.source_dir" in str(info.value) and "is not a directory" in str(info.value)
    assert not [op for op, _ in capture.calls if op == "CreateTrainingJob"]


def test_job_submit_records_and_status(spec: Any, aws: str) -> None:
    """Job.submit(target="sagemaker"): created on the emulator, recorded, and its status read back."""
    job = Job.parse(spec.job_data("status-check"))
    run = job.submit(target="sagemaker")
    found = Run.from_id(run.id)
    assert found.handle.region == spec.REGION and found.job_name == "status-check"
    status = found.status()
    assert status.state is RunState.SUCCEEDED  # moto completes jobs at once
    assert status.native_state == "Completed/Completed"
    assert status.details["model_artifacts"] == f"s3://{spec.BUCKET}/output/{run.native_id}/output/model.tar.gz"


def test_pull_unpacks_the_jobs_model_archive(spec: Any, aws: str, tmp_path: Path) -> None:
    """`trainctl pull` of a job on AWS: the archive at ModelArtifacts.S3ModelArtifacts (SageMaker's tar.gz of
    /opt/ml/model, the trainer's output folder) unpacked here. moto trains nothing, so the archive is put where
    DescribeTrainingJob says it is, packed as SageMaker packs the folder; one path that would leave the folder
    is refused by the "data" filter, and the rest arrives."""
    import boto3

    run = Job.parse(spec.job_data("pull-check")).submit(target="sagemaker")
    uri = run.status().details["model_artifacts"]
    model = tmp_path / "opt-ml-model"
    model.mkdir()
    (model / "model.json").write_text('{"model": "digits"}')
    (model / "model.safetensors").write_bytes(os.urandom(256))
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        tar.add(model, arcname=".")
    bucket, key = uri.removeprefix("s3://").split("/", 1)
    boto3.client("s3", region_name=spec.REGION).put_object(Bucket=bucket, Key=key, Body=buf.getvalue())

    pulled = run.pull(tmp_path / "pulled")
    assert sorted(p.name for p in pulled.iterdir()) == ["model.json", "model.safetensors"]
    assert (pulled / "model.safetensors").read_bytes() == (model / "model.safetensors").read_bytes()
    with pytest.raises(Exception, match="not an empty folder"):
        run.pull(pulled)

    evil = io.BytesIO()
    with tarfile.open(fileobj=evil, mode="w:gz") as tar:
        info = tarfile.TarInfo("../escaped.txt")
        info.size = 1
        tar.addfile(info, io.BytesIO(b"x"))
    boto3.client("s3", region_name=spec.REGION).put_object(Bucket=bucket, Key=key, Body=evil.getvalue())
    with pytest.raises(tarfile.TarError):
        run.pull(tmp_path / "evil" / "in")
    assert not (tmp_path / "evil" / "escaped.txt").exists()


def test_unknown_submit_option(spec: Any, aws: str) -> None:
    """Refused before anything is sent, as on every target (tests/sdk/test_targets.py): exit 2, named."""
    with pytest.raises(JobError, match="submit option 'wait_for': unknown to the sagemaker target") as info:
        Job.parse(spec.job_data("opts")).submit(target="sagemaker", wait_for=True)
    assert info.value.exit_code == 2


def test_status_of_unknown_job(aws: str) -> None:
    """Unknown, as on SLURM and Kubernetes; a run recorded nowhere here is then no run (exit 2, issue 37)."""
    from trainctl.runs.store import UnknownRunError

    bare = Run(target="sagemaker", native_id="never-submitted", handle=SageMakerHandle(region="us-east-1"))
    found = target.status(bare)
    assert found.state.value == "unknown" and found.native_state == "NotFound"
    assert found.reason.startswith("describe training job never-submitted: AWS said ValidationException")
    with pytest.raises(UnknownRunError, match="sagemaker:never-submitted: no such run") as info:
        bare.status()
    assert info.value.exit_code == 2


@pytest.mark.parametrize(
    ("status", "secondary", "state"),
    [
        ("InProgress", "Starting", RunState.QUEUED),
        ("InProgress", "LaunchingMLInstances", RunState.QUEUED),
        ("InProgress", "Downloading", RunState.QUEUED),
        ("InProgress", "Training", RunState.RUNNING),
        ("InProgress", "Restarting", RunState.RUNNING),
        ("Stopping", "Stopping", RunState.RUNNING),
        ("Completed", "Completed", RunState.SUCCEEDED),
        ("Failed", "Failed", RunState.FAILED),
        ("Stopped", "MaxRuntimeExceeded", RunState.CANCELLED),
        ("Weird", "", RunState.UNKNOWN),
    ],
)
def test_status_mapping(status: str, secondary: str, state: RunState) -> None:
    assert target.map_status(status, secondary) is state


def _write_logs(session: Any, streams: dict[str, list[str]]) -> None:
    logs = session.client("logs")
    with contextlib.suppress(logs.exceptions.ResourceAlreadyExistsException):
        logs.create_log_group(logGroupName=target.LOG_GROUP)
    base = int(time.time() * 1000)
    for stream, lines in streams.items():
        logs.create_log_stream(logGroupName=target.LOG_GROUP, logStreamName=stream)
        events = [{"timestamp": base + i, "message": line} for i, line in enumerate(lines)]
        logs.put_log_events(logGroupName=target.LOG_GROUP, logStreamName=stream, logEvents=events)


def test_logs_from_cloudwatch(spec: Any, capture: Any) -> None:
    run = target.submit(Job.parse(spec.job_data("with-logs")), now=NOW, boto_session=capture.session)
    name = run.native_id
    _write_logs(
        capture.session,
        {
            f"{name}/algo-1-1763726400": ["step 10 loss 1.2", "step 20 loss 0.8"],
            f"{name}/algo-2-1763726400": ["step 10 loss 1.3"],
            f"{name}x/algo-1-1763726400": ["another job's line"],
        },
    )
    assert list(target.logs(run)) == [
        "[algo-1] step 10 loss 1.2",
        "[algo-1] step 20 loss 0.8",
        "[algo-2] step 10 loss 1.3",
    ]
    # follow: the job has ended (moto completes at once), so it reads everything and returns.
    assert list(target.logs(run, follow=True, poll_s=0.01)) == list(target.logs(run))


def test_logs_before_any_stream(spec: Any, aws: str) -> None:
    run = Run(target="sagemaker", native_id="no-streams-yet", handle=SageMakerHandle(region=spec.REGION))
    assert list(target.logs(run)) == []


def test_cancel_stops_the_training_job(spec: Any, capture: Any) -> None:
    """StopTrainingJob on a running job (moto's stand-in: conftest MOTO_GAPS); the run then reads cancelled."""
    run = target.submit(Job.parse(spec.job_data("to-cancel")), now=NOW, boto_session=capture.session)
    spec.mark_in_progress(run.native_id)
    assert target.status(run).state.value == "running"
    target.cancel(run)
    final = target.status(run)
    assert (final.state.value, final.native_state) == ("cancelled", "Stopped/Stopped")


def test_cancel_says_what_aws_answered(spec: Any, aws: str) -> None:
    run = Run(target="sagemaker", native_id="no-such-job", handle=SageMakerHandle(region=spec.REGION))
    with pytest.raises(EngineError) as info:
        target.cancel(run)
    assert str(info.value) == (
        "cancel sagemaker:no-such-job: StopTrainingJob: AWS said ValidationException: Could not find training job "
        f"'arn:aws:sagemaker:{spec.REGION}:123456789012:training-job/no-such-job'."
    )


_GUARD = """
import os, socket, sys
_real_connect, _real_gai = socket.socket.connect, socket.getaddrinfo
def _bad(host):
    with open(os.environ["GUARD_LOG"], "a") as f:
        f.write(f"{host}\\n")
    return OSError(f"socket guard: {host} refused")
def connect(self, address):
    if self.family in (socket.AF_INET, socket.AF_INET6) and address[0] not in ("127.0.0.1", "localhost"):
        raise _bad(address[0])
    return _real_connect(self, address)
def getaddrinfo(host, *a, **k):
    if host is not None and host not in ("127.0.0.1", "localhost", b"127.0.0.1"):
        raise _bad(host)
    return _real_gai(host, *a, **k)
socket.socket.connect, socket.getaddrinfo = connect, getaddrinfo
"""


@pytest.mark.parametrize("via", ["direct", "estimator"])
def test_cli_submit_example(spec: Any, aws: str, tmp_path: Path, via: str) -> None:
    """`trainctl submit examples/digits-sagemaker.yaml --target sagemaker -O via=V` creates the job on the emulator."""
    if via == "estimator":
        pytest.importorskip("sagemaker", reason="the estimator path needs trainctl[sagemaker]")
    guard_dir = tmp_path / "guard"
    guard_dir.mkdir()
    (guard_dir / "sitecustomize.py").write_text(_GUARD)
    env = {**os.environ, "PYTHONPATH": str(guard_dir), "GUARD_LOG": str(tmp_path / "guard.log")}
    argv = [sys.executable, "-m", "trainctl", "submit", str(spec.REPO / "examples/digits-sagemaker.yaml")]
    bucket = ["--set", f"sagemaker.output_s3_uri=s3://{spec.BUCKET}/output/"]
    done = subprocess.run(
        [*argv, "--target", "sagemaker", "--set", f"name=cli-{via}", "--output", "json", "-O", f"via={via}", *bucket],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert not (tmp_path / "guard.log").exists(), (tmp_path / "guard.log").read_text()
    out = json.loads(done.stdout)
    assert out["id"].startswith(f"sagemaker:cli-{via}-") and out["handle"]["via"] == via
    import boto3

    desc = (
        boto3.Session(region_name=spec.REGION)
        .client("sagemaker")
        .describe_training_job(TrainingJobName=out["id"].split(":", 1)[1])
    )
    assert desc["ResourceConfig"]["InstanceCount"] == 2
    assert desc["HyperParameters"]["sagemaker_torch_distributed_enabled"] == "true"
    status = subprocess.run(
        [sys.executable, "-m", "trainctl", "status", out["id"], "--output", "json"],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    assert status.returncode == 0, status.stderr
    assert json.loads(status.stdout)["state"] == "succeeded"


def test_socket_guard_catches_outside_connections(socket_guard: Any) -> None:
    """The guard itself: resolving or connecting anywhere but 127.0.0.1 is refused and recorded."""
    import socket

    with pytest.raises(OSError, match="socket guard"):
        socket.getaddrinfo("sts.amazonaws.com", 443)
    with pytest.raises(OSError, match="socket guard"), socket.socket() as sock:
        sock.connect(("10.0.0.1", 443))
    assert socket_guard.violations == ["resolve 'sts.amazonaws.com'", "connect to '10.0.0.1'"]
    socket_guard.violations.clear()

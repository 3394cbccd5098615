"""Engine errors come back as exit 1 with the engine's own words, no traceback, nothing recorded;
a submission is retried only where a retry cannot start a second job.

SageMaker: a local HTTP server speaks the AWS JSON protocol and answers every call with one error
(403 AccessDenied, quota ResourceLimitExceeded, ThrottlingException) or is not there at all.
SLURM: the login host refuses the ssh connection (127.0.0.1 port 1), and an `sbatch` that times out.
"""

from __future__ import annotations

import json
import threading
from collections import Counter
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from run_cli import cli  # tests/support
from trainctl.job import Job

from .conftest import report

ECR_IMAGE = "123456789012.dkr.ecr.us-east-1.amazonaws.com/trainer:1"
ERRORS = {
    "forbidden": (400, "AccessDeniedException", "User is not authorized to perform: sagemaker:CreateTrainingJob"),
    "quota": (400, "ResourceLimitExceeded", "The account-level service limit 'ml.m5.xlarge for training job usage' is 0"),
    "throttled": (400, "ThrottlingException", "Rate exceeded"),
}  # fmt: skip


class FakeAws(ThreadingHTTPServer):
    mode = "forbidden"
    calls: Counter[str]


class Handler(BaseHTTPRequestHandler):
    server: FakeAws

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length", 0)))
        self.server.calls[self.headers.get("X-Amz-Target", self.path)] += 1
        status, code, message = ERRORS[self.server.mode]
        body = json.dumps({"__type": code, "message": message}).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/x-amz-json-1.1")
        self.send_header("x-amzn-ErrorType", code)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def fake_aws(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[FakeAws]:
    server = FakeAws(("127.0.0.1", 0), Handler)
    server.calls = Counter()
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    for key, value in {
        "AWS_ENDPOINT_URL": f"http://127.0.0.1:{server.server_address[1]}", "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing", "AWS_DEFAULT_REGION": "us-east-1", "AWS_CONFIG_FILE": str(tmp_path / "no"),
        "AWS_SHARED_CREDENTIALS_FILE": str(tmp_path / "no"), "TRAINCTL_HOME": str(tmp_path / "state"),
    }.items():  # fmt: skip
        monkeypatch.setenv(key, value)
    monkeypatch.delenv("AWS_PROFILE", raising=False)
    yield server
    server.shutdown()


def sagemaker_job(tmp_path: Path) -> Path:
    job = Job.parse({"name": "engine-errors", "image": ECR_IMAGE, "command": ["python", "train.py"],
                     "sagemaker": {"role_arn": "arn:aws:iam::123456789012:role/train", "instance_type": "ml.m5.xlarge",
                                   "output_s3_uri": "s3://bucket/out", "region": "us-east-1"}})  # fmt: skip
    path = tmp_path / "job.yaml"
    path.write_text(job.to_yaml())
    return path


def registry_rows(state: Path) -> int:
    from trainctl.runs.store import RunStore

    return len(RunStore(state / "runs.db").list()) if (state / "runs.db").exists() else 0


@pytest.mark.parametrize("mode", sorted(ERRORS))
def test_sagemaker_errors_exit_1_with_aws_words(mode: str, fake_aws: FakeAws, tmp_path: Path) -> None:
    fake_aws.mode = mode
    result = cli("submit", str(sagemaker_job(tmp_path)), "--target", "sagemaker")
    _, code, message = ERRORS[mode]
    creates = fake_aws.calls["SageMaker.CreateTrainingJob"]
    report(f"engine-error-sagemaker-{mode}", exit=result.exit_code, create_calls=creates)
    assert result.exit_code == 1, result.output
    assert code in result.output and message in result.output, result.output
    assert "Traceback" not in result.output
    assert registry_rows(tmp_path / "state") == 0
    if mode == "throttled":
        # botocore retries throttling with backoff; safe, because a second CreateTrainingJob with the
        # same TrainingJobName can never start a second job (SageMaker answers ResourceInUse)
        assert creates > 1, creates
    else:
        assert creates == 1, f"{mode} must not be retried: {creates} calls"


def test_sagemaker_unreachable_exit_1(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    import socket

    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    for key, value in {"AWS_ENDPOINT_URL": f"http://127.0.0.1:{port}", "AWS_ACCESS_KEY_ID": "testing",
                       "AWS_SECRET_ACCESS_KEY": "testing", "AWS_DEFAULT_REGION": "us-east-1",
                       "AWS_MAX_ATTEMPTS": "2", "TRAINCTL_HOME": str(tmp_path / "state")}.items():  # fmt: skip
        monkeypatch.setenv(key, value)
    result = cli("submit", str(sagemaker_job(tmp_path)), "--target", "sagemaker")
    assert result.exit_code == 1, result.output
    assert "Could not connect to the endpoint URL" in result.output and "Traceback" not in result.output
    assert registry_rows(tmp_path / "state") == 0


def test_slurm_login_unreachable_exit_1_with_ssh_words(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TRAINCTL_HOME", str(tmp_path / "state"))
    job = Job.parse({"name": "engine-errors", "command": ["python", "train.py"],
                     "slurm": {"login": "127.0.0.1", "workdir": "/tmp/x",
                               "ssh_command": ["ssh", "-o", "BatchMode=yes", "-o", "ConnectTimeout=5", "-p", "1"]}})  # fmt: skip
    path = tmp_path / "job.yaml"
    path.write_text(job.to_yaml())
    result = cli("submit", str(path), "--target", "slurm")
    assert result.exit_code == 1, result.output
    assert "Connection refused" in result.output and "Traceback" not in result.output, result.output
    assert registry_rows(tmp_path / "state") == 0


def test_slurm_sbatch_timeout_is_not_retried(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """sbatch is not idempotent (each call may queue a job): trainctl must call it once and report."""
    bindir, calls = tmp_path / "bin", tmp_path / "calls"
    bindir.mkdir()
    (bindir / "sbatch").write_text(
        f'#!/bin/sh\necho "$*" >> {calls}\n'
        'echo "sbatch: error: Batch job submission failed: Socket timed out on send/recv operation" >&2\nexit 1\n'
    )
    (bindir / "sbatch").chmod(0o755)
    monkeypatch.setenv("PATH", f"{bindir}:{__import__('os').environ['PATH']}")
    monkeypatch.setenv("TRAINCTL_HOME", str(tmp_path / "state"))
    job = Job.parse(
        {"name": "engine-errors", "command": ["python", "train.py"], "slurm": {"workdir": str(tmp_path / "w")}}
    )
    path = tmp_path / "job.yaml"
    path.write_text(job.to_yaml())
    result = cli("submit", str(path), "--target", "slurm")
    assert result.exit_code == 1, result.output
    assert "Socket timed out" in result.output and "Traceback" not in result.output
    assert len(calls.read_text().splitlines()) == 1, calls.read_text()
    assert registry_rows(tmp_path / "state") == 0

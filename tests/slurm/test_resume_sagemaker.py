"""Resume anywhere, between SageMaker and a SLURM cluster behind a login host: a SageMaker run's checkpoint
prefix (moto's S3 on 127.0.0.1, filled as SageMaker syncs /opt/ml/checkpoints) trains on, on the real
local SLURM cluster (2 nodes x 1) through an ssh stand-in; that SLURM run then moves back to SageMaker
(fetched over the same ssh, uploaded under the new training job's checkpoint prefix)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from trainctl import Job
from trainctl.runs.store import RunStore

pytestmark = [pytest.mark.slurm, pytest.mark.slow]
REGION = "us-east-1"
BUCKET = "trainctl-resume"


@pytest.fixture
def moto_aws(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[str]:
    """An AWS API emulator on 127.0.0.1 with a bucket and a role; this process's AWS settings point at it."""
    import boto3
    from moto.server import ThreadedMotoServer

    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    endpoint = f"http://{host}:{port}"
    empty = tmp_path / "aws-empty"
    empty.write_text("")
    for key in [k for k in os.environ if k.startswith("AWS_")]:
        monkeypatch.delenv(key)
    for key, value in {
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_DEFAULT_REGION": REGION,
        "AWS_EC2_METADATA_DISABLED": "true",
        "AWS_ENDPOINT_URL": endpoint,
        "AWS_CONFIG_FILE": str(empty),
        "AWS_SHARED_CREDENTIALS_FILE": str(empty),
    }.items():
        monkeypatch.setenv(key, value)
    boto3.client("s3").create_bucket(Bucket=BUCKET)
    boto3.client("iam").create_role(RoleName="trainer", AssumeRolePolicyDocument="{}")
    try:
        yield endpoint
    finally:
        server.stop()


def _sagemaker_job(name: str) -> dict[str, Any]:
    return {
        "name": name,
        "image": f"123456789012.dkr.ecr.{REGION}.amazonaws.com/trainctl-trainer:0.1.0",
        "trainer": {"model": "digits", "batch_size": 32, "epochs": 6, "lr": 0.003},
        "resources": {"nodes": 2, "gpus_per_node": 1},
        "data": {"train": f"s3://{BUCKET}/digits/train/", "val": f"s3://{BUCKET}/digits/val/"},
        "max_runtime": "1h",
        "sagemaker": {
            "role_arn": "arn:aws:iam::123456789012:role/trainer",
            "instance_type": "ml.g5.xlarge",
            "region": REGION,
            "output_s3_uri": f"s3://{BUCKET}/output/",
        },
    }


def test_sagemaker_to_slurm_behind_login_and_back(
    cluster: object,
    digits_data: Path,
    tmp_path: Path,
    fake_ssh: Any,
    home: Path,
    resume_helpers: Any,
    moto_aws: str,
    killed_source: Any,
) -> None:
    import boto3

    local = killed_source.run
    newest = sorted(Path(local.paths.checkpoint_dir).glob("step-*"))[-1]
    step = int(newest.name.removeprefix("step-"))
    source = Job.parse(_sagemaker_job("sm-src")).submit("sagemaker")
    prefix = f"output/{source.native_id}/checkpoints/"  # the training job's own
    s3 = boto3.client("s3")
    for path in sorted(p for p in Path(local.paths.checkpoint_dir).rglob("*") if p.is_file()):
        s3.upload_file(str(path), BUCKET, prefix + path.relative_to(local.paths.checkpoint_dir).as_posix())

    workdir = tmp_path / "remote"
    login = {
        "python_env": sys.prefix,
        "workdir": str(workdir),
        "login": "me@login",
        "ssh_command": [str(fake_ssh.command)],
    }
    data = resume_helpers.job(digits_data, "on-slurm", 1, slurm=login)
    data["resources"] = {"nodes": 2, "procs_per_node": 1}
    job_file = tmp_path / "on-slurm.yaml"
    job_file.write_text(yaml.safe_dump(data))
    trainctl = str(Path(sys.prefix) / "bin" / "trainctl")
    argv = [trainctl, "submit", str(job_file), "--target", "slurm", "--resume-from", source.id, "--wait"]
    start = time.monotonic()
    done = subprocess.run(argv, capture_output=True, text=True, timeout=400, env=os.environ)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    slurm_id = done.stderr.split("submitted ", 1)[1].split()[0]
    on_slurm = RunStore().get(slurm_id)
    assert on_slurm is not None
    came = on_slurm.resumed_from.model_dump()
    assert came["run"] == source.id and came["step"] == step
    assert came["checkpoint"] == f"s3://{BUCKET}/{prefix}{newest.name}/"
    run_dir = workdir / "runs" / f"{on_slurm.native_id}-{on_slurm.run_uid}"
    assert came["copied_to"] == str(run_dir / "checkpoints" / newest.name)
    log = next(workdir.glob("on-slurm-*.out")).read_text()
    assert f"at step {step} " in log and "on n[1-2]" in log, log[-3000:]
    summary = json.loads((run_dir / "output" / "summary.json").read_text())
    assert summary["world_size"] == 2 and summary["val_accuracy"] > 0.9, summary
    took = time.monotonic() - start

    # and back: the SLURM run's newest checkpoint, over the login host's ssh, under a new training job's prefix
    last = sorted((run_dir / "checkpoints").glob("step-*"))[-1]
    fake_ssh.forget()
    back = Job.parse(_sagemaker_job("sm-back")).submit("sagemaker", resume_from=slurm_id)
    came = back.resumed_from.model_dump()
    assert came["run"] == slurm_id and came["checkpoint"] == f"me@login:{last}"
    own = back.paths.checkpoint_dir  # a prefix of the new training job's own
    assert own.startswith(f"s3://{BUCKET}/output/sm-back-resumed-") and came["copied_to"] == f"{own}{last.name}/"
    key = f"{own.removeprefix(f's3://{BUCKET}/')}{last.name}/state.pt"
    assert s3.get_object(Bucket=BUCKET, Key=key)["Body"].read() == (last / "state.pt").read_bytes()
    commands = [c[-1] for c in fake_ssh.calls()]
    assert commands[0].startswith("ls -1A -- ") and [c for c in commands if c.startswith("tar -c ")] == [
        f"tar -c -C {run_dir / 'checkpoints'} -f - -- {last.name}"
    ], commands
    print(
        f"sagemaker -> slurm (login) 2x1 from step {step}: acc {summary['val_accuracy']:.4f} in {took:.0f}s; "
        f"slurm -> sagemaker from {last.name}"
    )

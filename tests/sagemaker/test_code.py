"""`code:` on SageMaker: the bundle is the S3 `code` channel (moto's S3 holds it), the hash rides in the
request's Environment, and the image's `train` entry point verifies it before running train.py (2 processes)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import yaml
from trainctl import Job
from trainctl.bundle import bundle_for, prepare
from trainctl.targets.sagemaker import engine as target

REPO = Path(__file__).resolve().parents[2]


def _job(spec: Any, tmp_path: Path) -> Job:
    folder = tmp_path / "code-job"
    shutil.copytree(REPO / "examples" / "code-job", folder)
    data = yaml.safe_load((folder / "job.yaml").read_text())
    data["sagemaker"] = spec.sagemaker_data(instance_type="ml.m5.xlarge")
    data["image"] = spec.IMAGE
    (folder / "job.yaml").write_text(yaml.safe_dump(data))
    return prepare(Job.from_yaml(folder / "job.yaml"))


def _run_image(request: dict[str, Any], root: Path, code: bytes) -> subprocess.CompletedProcess[str]:
    """What the container does: SageMaker's files under `root`, the code channel, the image's `train` script."""
    config = root / "opt/ml/input/config"
    config.mkdir(parents=True)
    (config / "resourceconfig.json").write_text(json.dumps({"current_host": "algo-1", "hosts": ["algo-1"]}))
    (config / "hyperparameters.json").write_text(json.dumps(request["HyperParameters"]))
    channels = {c["ChannelName"]: {"S3DistributionType": "FullyReplicated"} for c in request["InputDataConfig"]}
    (config / "inputdataconfig.json").write_text(json.dumps(channels))
    (root / "opt/ml/input/data/code").mkdir(parents=True)
    (root / "opt/ml/input/data/code/sourcedir.tar.gz").write_bytes(code)
    bin_dir = Path(sys.executable).parent
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "PET_", "TORCHELASTIC"))},
        **request["Environment"],
        "TRAINER_SAGEMAKER_ROOT": str(root),
        "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}",
    }
    argv = ["sh", str(REPO / "trainer_image/bin/train"), *request["AlgorithmSpecification"]["ContainerArguments"]]
    return subprocess.run(argv, capture_output=True, text=True, env=env, timeout=180, cwd=root)


def test_code_channel_in_s3_runs_the_folder_and_a_changed_bundle_is_refused(
    spec: Any, capture: Any, tmp_path: Path
) -> None:
    job = _job(spec, tmp_path)
    bundle = bundle_for(job)
    assert bundle is not None
    notes = " ".join(job.render("sagemaker").notes)
    assert bundle.sha256 in notes and "code` channel" in notes
    run = target.submit(job, boto_session=capture.session)
    sent = capture.only("CreateTrainingJob")
    assert sent["Environment"]["TRAINER_CODE_SHA256"] == bundle.sha256
    assert json.loads(sent["HyperParameters"]["sagemaker_program"]) == "train.py"
    uri = json.loads(sent["HyperParameters"]["sagemaker_submit_directory"])
    assert uri.startswith(f"s3://{spec.BUCKET}/output/{run.native_id}/")
    body = capture.session.client("s3").get_object(Bucket=spec.BUCKET, Key=uri.split("/", 3)[3])["Body"].read()
    assert body == bundle.data  # moto's S3 holds the exact bundle

    done = _run_image(sent, tmp_path / "host", body)
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads((tmp_path / "host/opt/ml/model/result.json").read_text())
    assert result["greeting"] == "hello from helper.py" and result["world_size"] == 2
    assert result["code_dir"] == str(tmp_path / "host/opt/ml/code")

    (tmp_path / "code-job" / "src" / "helper.py").write_text("GREETING = 'changed'\n")
    changed = bundle_for(prepare(Job.from_yaml(tmp_path / "code-job" / "job.yaml")))
    assert changed is not None and changed.sha256 != bundle.sha256
    refused = _run_image(sent, tmp_path / "host2", changed.data)
    assert refused.returncode == 2, refused.stderr[-3000:]
    assert bundle.sha256 in refused.stderr and changed.sha256 in refused.stderr
    assert not (tmp_path / "host2/opt/ml/code").exists()
    failure = (tmp_path / "host2/opt/ml/output/failure").read_text()
    assert changed.sha256 in failure

"""`code:` on SageMaker: the bundle is the S3 `code` channel (moto's S3 holds it), the hash rides in the
request's Environment, and the image's `train` entry point verifies it before running train.py (2 processes)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import yaml
from sagemaker_host import run_image
from trainctl import Job
from trainctl.submit.bundle import bundle_for, prepare
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

    done = run_image(sent, tmp_path / "host", body)
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads((tmp_path / "host/opt/ml/model/result.json").read_text())
    assert result["greeting"] == "hello from helper.py" and result["world_size"] == 2
    assert result["code_dir"] == str(tmp_path / "host/opt/ml/code")

    (tmp_path / "code-job" / "src" / "helper.py").write_text("GREETING = 'changed'\n")
    changed = bundle_for(prepare(Job.from_yaml(tmp_path / "code-job" / "job.yaml")))
    assert changed is not None and changed.sha256 != bundle.sha256
    refused = run_image(sent, tmp_path / "host2", changed.data)
    assert refused.returncode == 2, refused.stderr[-3000:]
    assert bundle.sha256 in refused.stderr and changed.sha256 in refused.stderr
    assert not (tmp_path / "host2/opt/ml/code").exists()
    failure = (tmp_path / "host2/opt/ml/output/failure").read_text()
    assert changed.sha256 in failure

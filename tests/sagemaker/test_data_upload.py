"""Local data on SageMaker (issue 35 §3), against moto over HTTP: submit uploads each local input once to
`<output>/trainctl-data/<sha256>/` and the CreateTrainingJob request's channels point there; a second submit of the
same content uploads nothing; render shows the prefix with `<sha256>` and says what submit does; local mode keeps
the path (file://)."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

from trainctl.job import Job
from trainctl.targets.sagemaker import engine as target
from trainctl.targets.sagemaker.render import render

UPLOADS = ("PutObject", "CreateMultipartUpload", "UploadPart")


def _job(spec: Any, tmp_path: Path) -> Job:
    data = tmp_path / "data"
    (data / "val").mkdir(parents=True)
    (data / "train.jsonl").write_text('{"x": [1, 2], "y": 0}\n' * 50)
    (data / "val" / "part-0.jsonl").write_text('{"x": [3, 4], "y": 1}\n' * 10)
    job_file = tmp_path / "job.yaml"
    job_file.write_text(json.dumps(spec.job_data("local-data", data={"train": "data/train.jsonl", "val": "data/val"})))
    return Job.from_yaml(job_file)


def _digest(listing: list[tuple[str, bytes]]) -> str:
    """The content's sha256 as data_upload.py defines it, computed here from the bytes."""
    items = [{"name": n, "sha256": hashlib.sha256(b).hexdigest(), "size": len(b)} for n, b in sorted(listing)]
    return hashlib.sha256(json.dumps(items, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def test_local_inputs_are_uploaded_once_content_addressed_and_the_channels_point_there(
    spec: Any, capture: Any, tmp_path: Path
) -> None:
    job = _job(spec, tmp_path)
    run = target.submit(job, boto_session=capture.session)
    sent = capture.only("CreateTrainingJob")
    train = _digest([("train.jsonl", (tmp_path / "data" / "train.jsonl").read_bytes())])
    val = _digest([("part-0.jsonl", (tmp_path / "data" / "val" / "part-0.jsonl").read_bytes())])
    channels = {c["ChannelName"]: c["DataSource"]["S3DataSource"]["S3Uri"] for c in sent["InputDataConfig"]}
    assert channels == {
        "train": f"s3://{spec.BUCKET}/output/trainctl-data/{train}/",
        "val": f"s3://{spec.BUCKET}/output/trainctl-data/{val}/",
    }
    s3 = capture.session.client("s3")
    keys = [o["Key"] for o in s3.list_objects_v2(Bucket=spec.BUCKET, Prefix="output/trainctl-data/")["Contents"]]
    assert sorted(keys) == sorted([
        f"output/trainctl-data/{train}/train.jsonl", f"output/trainctl-data/{train}.json",
        f"output/trainctl-data/{val}/part-0.jsonl", f"output/trainctl-data/{val}.json",
    ])  # fmt: skip
    body = s3.get_object(Bucket=spec.BUCKET, Key=f"output/trainctl-data/{train}/train.jsonl")["Body"].read()
    assert body == (tmp_path / "data" / "train.jsonl").read_bytes()
    desc = capture.session.client("sagemaker").describe_training_job(TrainingJobName=run.native_id)
    assert [c["DataSource"]["S3DataSource"]["S3Uri"] for c in desc["InputDataConfig"]] == list(channels.values())
    assert sum(op in UPLOADS for op, _ in capture.calls) == 4

    capture.calls.clear()
    again = target.submit(job, boto_session=capture.session)
    assert again.native_id != run.native_id
    assert [op for op, _ in capture.calls if op in UPLOADS] == []  # the same content: nothing uploaded
    second = capture.only("CreateTrainingJob")
    assert [c["DataSource"]["S3DataSource"]["S3Uri"] for c in second["InputDataConfig"]] == list(channels.values())


def test_render_shows_the_content_addressed_prefix_and_local_mode_keeps_the_path(spec: Any, tmp_path: Path) -> None:
    job = _job(spec, tmp_path)
    shown = render(job)
    uris = [c["DataSource"]["S3DataSource"]["S3Uri"] for c in shown.native["InputDataConfig"]]
    assert uris == [f"s3://{spec.BUCKET}/output/trainctl-data/<sha256>/"] * 2
    assert any(n.startswith(f"data.train: {tmp_path}/data/train.jsonl is uploaded at submit to") for n in shown.notes)
    local = render(job, local=True).native["InputDataConfig"]
    assert local[0]["DataSource"]["FileDataSource"]["FileUri"] == f"file://{tmp_path}/data/train.jsonl"


def test_the_sagemaker_sdk_path_sends_the_same_uploaded_channels(spec: Any, capture: Any, tmp_path: Path) -> None:
    """via=estimator (SageMaker SDK 2's PyTorch estimator) builds from the same request: the same prefixes."""
    job = _job(spec, tmp_path)
    target.submit(job, via="estimator", boto_session=capture.session)
    sent = capture.only("CreateTrainingJob")
    uris = sorted(
        c["DataSource"]["S3DataSource"]["S3Uri"] for c in sent["InputDataConfig"] if c["ChannelName"] != "code"
    )
    assert len(uris) == 2 and all(
        u.startswith(f"s3://{spec.BUCKET}/output/trainctl-data/") and u.endswith("/") for u in uris
    ), uris
    assert "<sha256>" not in json.dumps(sent)

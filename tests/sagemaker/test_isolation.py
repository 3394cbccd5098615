"""Issue 22 on SageMaker: the default checkpoint prefix is one per training job,
`<output>/<training job name>/checkpoints/` (SageMaker's RetryStrategy retries stay in it).

Against the moto server: two submissions of the same job get two prefixes; a checkpoint in the first's is
not in the second's; `--resume-from` the first names the changed learning rate. In local mode (`local=true`: containers
algo-1/algo-2 of the trainer image): two runs of the same digits job both train from step 0, and
`--resume-from` the first continues it, its trainer naming the change in the log.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import boto3
import pytest
from trainctl import Job
from trainctl.runs.store import RunStore

pytestmark = pytest.mark.slow
TRAINCTL = [sys.executable, "-m", "trainctl"]


def _status(run_id: str) -> str:
    return subprocess.run([*TRAINCTL, "status", run_id], capture_output=True, text=True, timeout=120).stdout


def _keys(spec: Any, uri: str) -> list[str]:
    s3 = boto3.Session(region_name=spec.REGION).client("s3")
    listed = s3.list_objects_v2(Bucket=spec.BUCKET, Prefix=uri.removeprefix(f"s3://{spec.BUCKET}/"))
    return [o["Key"] for o in listed.get("Contents", [])]


def test_each_training_job_has_its_own_prefix_and_resume_names_the_change(
    spec: Any, aws: str, killed_source: Any
) -> None:
    local = killed_source.run  # real checkpoints to put where SageMaker would sync them
    sm = boto3.Session(region_name=spec.REGION).client("sagemaker")
    runs = []
    for lr in (0.003, 0.01):
        job = Job.parse(spec.job_data()).with_overrides([f"trainer.lr={lr}"])
        run = job.submit("sagemaker")
        uri = run.paths.checkpoint_dir
        assert uri == f"s3://{spec.BUCKET}/output/{run.native_id}/checkpoints/", uri
        assert sm.describe_training_job(TrainingJobName=run.native_id)["CheckpointConfig"]["S3Uri"] == uri
        runs.append(run)
    a, b = runs
    s3 = boto3.Session(region_name=spec.REGION).client("s3")
    ckpts = Path(local.paths.checkpoint_dir)
    for path in sorted(p for p in ckpts.rglob("*") if p.is_file()):  # as SageMaker syncs /opt/ml/checkpoints
        key = a.paths.checkpoint_dir.removeprefix(f"s3://{spec.BUCKET}/") + path.relative_to(ckpts).as_posix()
        s3.upload_file(Filename=str(path), Bucket=spec.BUCKET, Key=key)
    assert _keys(spec, a.paths.checkpoint_dir) and _keys(spec, b.paths.checkpoint_dir) == []

    resumed = Job.parse(spec.job_data()).with_overrides(["trainer.lr=0.01"]).submit("sagemaker", resume_from=a.id)
    came = resumed.resumed_from.model_dump()
    # the checkpoints came from a local run of the resume tests' job: every other setting it had is named too
    assert came["run"] == a.id and "lr 0.003 -> 0.01" in came["changes"], came
    assert came["copied_to"].startswith(resumed.paths.checkpoint_dir) and _keys(spec, b.paths.checkpoint_dir) == []
    assert "lr 0.003 -> 0.01" in _status(resumed.id).split("changed since that checkpoint: ", 1)[1]


def _local_job(spec: Any, image: str, lr: float, epochs: int = 2) -> Job:
    return Job.parse(
        {
            "name": "digits",
            "image": image,
            "trainer": {"model": "digits", "batch_size": 32, "epochs": epochs, "lr": lr, "log_every": 10},
            "resources": {"nodes": 2, "gpus_per_node": 0, "procs_per_node": 1},
            "data": {"train": f"s3://{spec.BUCKET}/digits/train/", "val": f"s3://{spec.BUCKET}/digits/val/"},
            "checkpoint": {"every_steps": 10},
            "max_runtime": "1h",
            "sagemaker": spec.sagemaker_data(instance_type="ml.c5.xlarge"),
        }
    )


def test_local_mode_runs_start_fresh_and_resume_from_continues_with_the_change(
    spec: Any, aws: str, trainer_image: Any
) -> None:
    s3 = boto3.client("s3", endpoint_url=aws)
    for split in ("train", "val"):
        path = spec.REPO / "examples" / "data" / "digits" / f"{split}.jsonl"
        s3.upload_file(str(path), spec.BUCKET, f"digits/{split}/{split}.jsonl")
    runs = []
    for lr in (0.003, 0.01):
        run = _local_job(spec, trainer_image.ref, lr).submit("sagemaker", local=True)
        log = spec.finish(run)
        assert "resumed from" not in log and "step 10/" in log, log[-3000:]
        summary = run.summary()
        assert summary is not None and summary["resumed_from"] is None, summary
        runs.append((run, summary))
    (a, first), (b, _) = runs
    a_ckpts = sorted((Path(a.paths.run_dir) / "algo-1" / "checkpoints").glob("step-*"))
    b_ckpts = sorted((Path(b.paths.run_dir) / "algo-1" / "checkpoints").glob("step-*"))
    assert [p.name for p in a_ckpts] == [p.name for p in b_ckpts]  # each trained all its steps, in its own folder

    resumed = _local_job(spec, trainer_image.ref, 0.01, epochs=4).submit("sagemaker", local=True, resume_from=a.id)
    log = spec.finish(resumed)
    came = resumed.resumed_from.model_dump()
    named = "epochs 2 -> 4, lr 0.003 -> 0.01"
    assert came["changes"] == named.split(", ") and came["checkpoint"] == str(a_ckpts[-1]), came
    assert f"resumed from /opt/ml/checkpoints/{a_ckpts[-1].name} at step {first['steps']} " in log, log[-3000:]
    assert f"settings changed since that checkpoint: {named}" in log
    assert f"changed since that checkpoint: {named}" in _status(resumed.id)
    summary = resumed.summary()
    assert summary is not None and summary["steps"] == 2 * first["steps"], summary
    assert RunStore().get(resumed.id) is not None
    print(f"sagemaker local mode: 2 runs from step 0, resumed at step {first['steps']} with {named}")

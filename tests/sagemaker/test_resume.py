"""`--resume-from` onto SageMaker, against the moto server (issue 18): a killed local digits run's newest
verified checkpoint lands under the job's checkpoint S3 prefix (what SageMaker syncs into
/opt/ml/checkpoints before the trainer starts), and the training job's CheckpointConfig names that prefix."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from run_cli import trainctl  # tests/support
from trainctl import Job
from trainctl.submit.bundle import prepare
from trainctl.submit.resume import ResumeError

pytestmark = pytest.mark.slow


def test_resume_from_a_local_run_uploads_under_the_checkpoint_prefix(spec: Any, aws: str, killed_source: Any) -> None:
    import boto3

    source = killed_source.recorded()

    run = prepare(Job.parse(spec.job_data())).submit("sagemaker", resume_from=source.id)
    came = run.resumed_from.model_dump()
    step_dir = f"step-{came['step']:08d}"
    # a prefix of the new training job's own: no other run's checkpoints are there
    own = run.paths.checkpoint_dir
    assert own.startswith(f"s3://{spec.BUCKET}/output/digits-resumed-") and own.endswith("/checkpoints/"), own
    prefix = f"{own.removeprefix(f's3://{spec.BUCKET}/')}{step_dir}/"
    assert came["run"] == source.id and came["copied_to"] == f"s3://{spec.BUCKET}/{prefix}"

    s3 = boto3.Session(region_name=spec.REGION).client("s3")
    listed = s3.list_objects_v2(Bucket=spec.BUCKET, Prefix=prefix)
    keys = sorted(o["Key"].removeprefix(prefix) for o in listed.get("Contents", []))
    local = Path(came["checkpoint"])
    assert keys == sorted(p.relative_to(local).as_posix() for p in local.rglob("*") if p.is_file()), keys
    body = s3.get_object(Bucket=spec.BUCKET, Key=prefix + "state.pt")["Body"].read()
    assert body == (local / "state.pt").read_bytes()

    described = (
        boto3.Session(region_name=spec.REGION).client("sagemaker").describe_training_job(TrainingJobName=run.native_id)
    )
    assert described["CheckpointConfig"] == {"S3Uri": own, "LocalPath": "/opt/ml/checkpoints"}
    again = prepare(Job.parse(spec.job_data())).submit("sagemaker", resume_from=source.id)
    assert again.paths.checkpoint_dir != own  # a second resume: a fresh prefix again
    shared = prepare(Job.parse(spec.job_data()).with_overrides([f"sagemaker.checkpoint_s3_uri={own}"]))
    with pytest.raises(ResumeError, match="already holds checkpoints"):  # a user's prefix that holds some: refused
        shared.submit("sagemaker", resume_from=source.id)


def _upload(s3: Any, folder: Path, bucket: str, prefix: str) -> None:
    """A checkpoint folder under an S3 prefix, key for file, as SageMaker syncs /opt/ml/checkpoints."""
    for path in sorted(p for p in folder.rglob("*") if p.is_file()):
        s3.upload_file(Filename=str(path), Bucket=bucket, Key=prefix + path.relative_to(folder).as_posix())


def test_a_sagemaker_runs_checkpoints_resume_locally_newest_first(
    spec: Any, aws: str, tmp_path: Path, resume_helpers: Any, killed_source: Any
) -> None:
    """Resume anywhere: the checkpoint prefix of a recorded SageMaker run (filled from a real 2-process
    local digits run, as SageMaker syncs /opt/ml/checkpoints) is fetched here and trains on locally; a
    corrupt newest checkpoint falls back to the previous one, and older ones are never downloaded."""
    import boto3
    from trainctl.runs.store import RunStore, state_dir
    from trainctl.submit import resume
    from trainctl.targets.lookup import get_target

    data = killed_source.data
    local = killed_source.run
    newest = sorted(Path(local.paths.checkpoint_dir).glob("step-*"))[-1]
    step = int(newest.name.removeprefix("step-"))

    source = prepare(Job.parse(spec.job_data("smsrc"))).submit("sagemaker")
    prefix = f"output/{source.native_id}/checkpoints/"  # the training job's own
    assert source.paths.checkpoint_dir == f"s3://{spec.BUCKET}/{prefix}"
    s3 = boto3.Session(region_name=spec.REGION).client("s3")
    _upload(s3, Path(local.paths.checkpoint_dir), spec.BUCKET, prefix)
    for old in range(1, 4):  # an older history the fetch must not download
        _upload(s3, newest, spec.BUCKET, f"{prefix}step-{old:08d}/")
    corrupt = f"{prefix}step-{step + 100:08d}/"  # the newest, cut short (a sync interrupted)
    _upload(s3, newest, spec.BUCKET, corrupt)
    s3.put_object(Bucket=spec.BUCKET, Key=corrupt + "state.pt", Body=(newest / "state.pt").read_bytes()[:100])

    tried: list[str] = []

    def fetch(run: Any, dest: Path, accept: Any) -> Any:
        def recording(folder: Path) -> bool:
            tried.append(folder.name)
            return bool(accept(folder))

        return get_target(run.target).fetch_checkpoints(run, dest, recording)

    job = prepare(Job.parse(resume_helpers.job(data, "from-sm", 2)))
    found = resume.source_of(resume.recorded(source.id), job, fetch)
    assert tried == [f"step-{step + 100:08d}", newest.name], tried
    assert found.info["step"] == step and found.origin == f"s3://{spec.BUCKET}/{prefix}{newest.name}/"
    assert sorted(p.name for p in found.files.parent.iterdir()) == [newest.name]  # corrupt one deleted
    assert found.staged == found.files.parent and found.staged.parent == state_dir() / "resume" / source.id.replace(
        ":", "_"
    )
    resume.unstage(found)

    # SageMaker -> SageMaker: fetched here, then uploaded under the new job's checkpoint prefix
    moved = prepare(Job.parse(spec.job_data("smdest"))).submit("sagemaker", resume_from=source.id)
    placed = f"{moved.paths.checkpoint_dir.removeprefix(f's3://{spec.BUCKET}/')}{newest.name}/"
    assert placed.startswith("output/smdest-resumed-")
    assert moved.resumed_from.checkpoint == found.origin
    assert moved.resumed_from.copied_to == f"s3://{spec.BUCKET}/{placed}"
    assert (
        s3.get_object(Bucket=spec.BUCKET, Key=placed + "state.pt")["Body"].read() == (newest / "state.pt").read_bytes()
    )

    job_file = tmp_path / "from-sm.yaml"
    job_file.write_text(yaml.safe_dump(resume_helpers.job(data, "from-sm", 2)))
    done = trainctl("submit", str(job_file), "--target", "local", "--resume-from", source.id, "--wait")
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    run_id = done.stderr.split("submitted ", 1)[1].split()[0]
    resumed = RunStore().get(run_id)
    assert resumed is not None
    came = resumed.resumed_from.model_dump()
    assert came["run"] == source.id and came["target"] == "sagemaker" and came["step"] == step
    assert came["checkpoint"] == f"s3://{spec.BUCKET}/{prefix}{newest.name}/"
    summary = json.loads((Path(resumed.paths.output_dir) / "summary.json").read_text())
    assert Path(summary["resumed_from"]).name == newest.name and summary["val_accuracy"] > 0.9, summary
    assert not (state_dir() / "resume").exists() or not any((state_dir() / "resume").iterdir())
    status = trainctl("status", run_id, timeout=60)
    assert f"resumed from: {source.id} step {step} (s3://{spec.BUCKET}/{prefix}{newest.name}/)" in status.stdout
    print(f"sagemaker -> local from step {step}: acc {summary['val_accuracy']:.4f}, tried {tried}")


def test_an_empty_checkpoint_prefix_is_exit_2_with_words(spec: Any, aws: str, tmp_path: Path) -> None:
    """A recorded run without a checkpoint prefix in its record (recorded before it was kept): the prefix is
    read from DescribeTrainingJob's CheckpointConfig; nothing there is exit 2, and nothing is submitted."""
    from trainctl.runs.state import RunRef
    from trainctl.runs.store import RunStore, state_dir
    from trainctl.targets.sagemaker.handle import SageMakerHandle

    source = prepare(Job.parse(spec.job_data("smempty"))).submit("sagemaker")
    handle = SageMakerHandle(region=spec.REGION)
    RunStore().record(RunRef(target="sagemaker", native_id=source.native_id, job_name="smempty", handle=handle))
    job_file = tmp_path / "next.yaml"
    job_file.write_text(yaml.safe_dump(spec.job_data("smnext")))
    before = len(RunStore().list())
    done = trainctl("submit", str(job_file), "--target", "sagemaker", "--resume-from", source.id, timeout=120)
    where = f"s3://{spec.BUCKET}/output/{source.native_id}/checkpoints/"
    assert done.returncode == 2 and f"no checkpoint (step-* folder) under {where}" in done.stderr, done.stderr
    assert len(RunStore().list()) == before
    assert not list((state_dir() / "resume").rglob("*")), "a refused fetch left its staging folder"


def test_a_fetched_checkpoint_of_another_model_stops_the_search(spec: Any, aws: str) -> None:
    """Another model's checkpoint is refused at once (exit 2, the trainer's words): an older one of the
    same run would be no better, so it is not downloaded."""
    import boto3
    from trainctl.submit import resume
    from trainctl.targets.lookup import get_target

    source = prepare(Job.parse(spec.job_data("smother"))).submit("sagemaker")
    s3 = boto3.Session(region_name=spec.REGION).client("s3")
    meta = {"format": 1, "files": {}, "model": "resnet50", "step": 0}  # trainer/checkpoint/files.py FORMAT, META
    for step in (4, 8):
        body = json.dumps({**meta, "step": step}).encode()
        key = f"output/{source.native_id}/checkpoints/step-{step:08d}/meta.json"
        s3.put_object(Bucket=spec.BUCKET, Key=key, Body=body)
    tried: list[str] = []

    def fetch(run: Any, dest: Path, accept: Any) -> Any:
        return get_target(run.target).fetch_checkpoints(run, dest, lambda f: tried.append(f.name) or accept(f))

    with pytest.raises(ResumeError, match="written by model 'resnet50', but this run trains 'digits'"):
        resume.source_of(resume.recorded(source.id), prepare(Job.parse(spec.job_data("smnext"))), fetch)
    assert tried == ["step-00000008"]


def test_a_local_mode_runs_checkpoints_resume_on_the_local_target(
    spec: Any, aws: str, trainer_image: Any, tmp_path: Path, resume_helpers: Any
) -> None:
    """A `local=true` SageMaker run (containers algo-1/algo-2 of the trainer image) cancelled after its first
    checkpoints: its algo-1 /opt/ml/checkpoints folder is the source, no S3 involved."""
    import time

    import boto3
    from trainctl.runs.store import RunStore

    s3 = boto3.client("s3", endpoint_url=aws)
    digits = spec.REPO / "examples" / "data" / "digits"
    for split in ("train", "val"):
        s3.upload_file(str(digits / f"{split}.jsonl"), spec.BUCKET, f"digits/{split}/{split}.jsonl")
    data = resume_helpers.job(digits, "smlocal", 1)
    data.update(image=trainer_image.ref, resources={"nodes": 2, "gpus_per_node": 0, "procs_per_node": 1})
    data.update({k: spec.job_data()[k] for k in ("data", "max_runtime")})
    data["sagemaker"] = spec.sagemaker_data(instance_type="ml.c5.xlarge")
    source = prepare(Job.parse(data)).submit("sagemaker", local=True)
    assert source.handle.local is True
    ckpts = Path(source.paths.run_dir) / "algo-1" / "checkpoints"
    deadline = time.monotonic() + 300
    while not list(ckpts.glob("step-*/meta.json")):
        assert time.monotonic() < deadline, "no checkpoint within 300 s:\n" + "\n".join(source.logs())
        time.sleep(0.2)
    source.cancel()
    assert source.wait(timeout=180, poll=1).state.value != "succeeded", "the source run ended before the cancel"

    job_file = tmp_path / "here.yaml"
    job_file.write_text(yaml.safe_dump(resume_helpers.job(digits, "here", 2)))
    done = trainctl("submit", str(job_file), "--target", "local", "--resume-from", source.id, "--wait")
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    resumed = RunStore().get(done.stderr.split("submitted ", 1)[1].split()[0])
    assert resumed is not None
    came = resumed.resumed_from.model_dump()
    newest = sorted(p for p in ckpts.glob("step-*") if (p / "meta.json").exists())[-1]
    assert came["run"] == source.id and came["checkpoint"] == str(newest), (came, newest)
    summary = json.loads((Path(resumed.paths.output_dir) / "summary.json").read_text())
    assert Path(summary["resumed_from"]).name == newest.name and summary["val_accuracy"] > 0.9, summary
    print(f"sagemaker local=true -> local from {newest.name}: acc {summary['val_accuracy']:.4f}")

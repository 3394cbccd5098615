"""`output_dir: s3://...` (issue 35 §4): the digits job on the local target leaves its output folder in S3 (moto's
server over HTTP) under `<prefix>/<run uid>/` with `_complete` last; `trainctl status` says where; `trainctl pull`
brings it back from there, verified and loadable. Render says so on local, SLURM and Kubernetes, and refuses it
where the launcher cannot upload (SLURM's one srun task per process, `launch: per_node`)."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml
from run_cli import trainctl  # tests/support
from s3_server import DropProxy, S3Server, s3_server  # tests/support
from trainctl import Job, Run

ROOT = Path(__file__).resolve().parents[2]
BUCKET = "digits-out"


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Iterator[S3Server]:
    with s3_server(tmp_path_factory.mktemp("moto"), buckets=(BUCKET,)) as server:
        yield server


def _job(digits_data: Path, **extra: Any) -> dict[str, Any]:
    job = yaml.safe_load((ROOT / "examples" / "digits.yaml").read_text())
    job["data"] = {"train": str(digits_data / "train.jsonl"), "val": str(digits_data / "val.jsonl")}
    job["trainer"]["epochs"] = 1
    job["output_dir"] = f"s3://{BUCKET}/runs"
    return {**job, **extra}


def _ckpt() -> dict[str, Any]:
    """checkpoint: mirrored to S3 every 20 steps (the 1-epoch run publishes at least 2), the newest 2 kept."""
    return {"dir": f"s3://{BUCKET}/ckpt", "every_steps": 20, "keep": 2}


@dataclass
class UploadedRun:
    """The 1-epoch digits run with `output_dir: s3://.../runs` and `checkpoint.dir: s3://.../ckpt`, in a
    TRAINCTL_HOME of its own, and what it left that a test reads after another test may have changed the store."""

    run: Run
    home: Path
    state: str
    log: str
    ckpt_keys: set[str]  # the keys under ckpt/ right after it


@pytest.fixture(scope="module")
def uploaded_run(tmp_path_factory: pytest.TempPathFactory, store: S3Server, digits_data: Path) -> UploadedRun:
    """One run for the tests of the output upload and of the checkpoint mirror (the output test's run had the
    example's local checkpoints, the mirror test's first run no output_dir: neither reads what the other adds).
    The store's and home's variables are set for the run only (MonkeyPatch.context)."""
    home = tmp_path_factory.mktemp("uploaded-run") / "trainctl-home"
    with pytest.MonkeyPatch.context() as mp:
        for key, value in {**store.env(), "TRAINCTL_HOME": str(home)}.items():
            mp.setenv(key, value)
        run = Job.parse(_job(digits_data, checkpoint=_ckpt())).submit("local")
        state = run.wait(timeout=300, poll=0.5).state.value
        log = "\n".join(run.logs())
    s3: Any = store.client()
    keys = {i["Key"] for i in s3.list_objects_v2(Bucket=BUCKET, Prefix="ckpt/").get("Contents", [])}
    return UploadedRun(run, home, state, log, keys)


@pytest.mark.slow  # a run, an upload and a pull: 33 s on 2 loaded cores
def test_the_digits_model_lands_in_s3_and_pull_brings_it_back_loadable(
    uploaded_run: UploadedRun, store: S3Server, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for key, value in store.env().items():
        monkeypatch.setenv(key, value)
    monkeypatch.setenv("TRAINCTL_HOME", str(uploaded_run.home))  # the run's: status and pull find it there
    run = uploaded_run.run
    assert uploaded_run.state == "succeeded", uploaded_run.log[-3000:]
    dest = f"s3://{BUCKET}/runs/{run.run_uid}/"
    assert run.paths.output_s3 == dest
    assert run.paths.output_dir and run.paths.output_dir.endswith("/output")  # written locally as ever
    s3: Any = store.client()
    keys = {i["Key"] for i in s3.list_objects_v2(Bucket=BUCKET, Prefix=f"runs/{run.run_uid}/")["Contents"]}
    prefix = f"runs/{run.run_uid}/"
    assert {
        prefix + n for n in ("_complete", "model.safetensors", "model.json", "summary.json", "metrics.jsonl")
    } <= keys
    assert any(k.startswith(prefix + "tensorboard/") for k in keys)
    manifest = json.loads(s3.get_object(Bucket=BUCKET, Key=prefix + "_complete")["Body"].read())
    assert manifest["exit_code"] == 0 and manifest["run_uid"] == run.run_uid
    log = "\n".join(run.logs())
    assert f"-> {dest} (" in log and "_complete written" in log and "testing-secret" not in log

    status = trainctl("status", run.id)
    assert f"  output: {dest} (uploaded after each attempt" in status.stdout, status.stdout + status.stderr
    local = Path(run.paths.output_dir)
    os.rename(local, local.with_name("output-gone"))  # pull reads S3, not this machine's copy
    shown = trainctl("pull", run.id, str(tmp_path / "pulled"))
    assert shown.returncode == 0, shown.stdout + shown.stderr
    folder = tmp_path / "pulled"
    meta = json.loads((folder / "model.json").read_text())
    assert hashlib.sha256((folder / meta["file"]).read_bytes()).hexdigest() == meta["sha256"]
    from safetensors.torch import load_file

    assert load_file(str(folder / meta["file"]))  # loadable: the tensors of the digits model

    s3.delete_object(Bucket=BUCKET, Key=prefix + "_complete")  # an upload that did not finish: pull refuses it
    refused = trainctl("pull", run.id, str(tmp_path / "again"))
    assert refused.returncode != 0 and f"{dest} has no _complete" in refused.stderr, refused.stderr
    assert not (tmp_path / "again").exists()


def test_render_names_the_upload_on_local_slurm_and_kubernetes(digits_data: Path, tmp_path: Path) -> None:
    path = tmp_path / "job.yaml"
    ckpt = {"dir": f"s3://{BUCKET}/ckpt", "every_steps": 20}
    path.write_text(yaml.safe_dump(_job(digits_data, kubernetes={"pvc": "data"}, checkpoint=ckpt)))
    for target in ("local", "slurm", "kubernetes"):
        shown = trainctl("render", str(path), "--target", target)
        assert shown.returncode == 0, shown.stderr
        assert f"--output-s3 s3://{BUCKET}/runs" in shown.stdout.replace("- ", "").replace("\n", " ") or (
            f"- s3://{BUCKET}/runs" in shown.stdout and "- --output-s3" in shown.stdout
        ), (target, shown.stdout)
        assert f"note: output_dir: s3://{BUCKET}/runs: the output folder is written in the run's folder" in shown.stderr
        assert "TRAINER_OUTPUT_DIR=s3://" not in shown.stdout and "output-dir s3://" not in shown.stdout, target
        assert "TRAINER_CHECKPOINT_S3" in shown.stdout and "TRAINER_CHECKPOINT_DIR=s3://" not in shown.stdout, target
        assert f"note: checkpoint.dir: s3://{BUCKET}/ckpt: checkpoints are written in the run's folder" in shown.stderr


@pytest.mark.parametrize(
    ("target", "extra", "said"),
    [
        ("slurm", {"slurm": {"launch": "srun"}}, "with launch srun it becomes the program"),
        ("local", {"launch": "per_node", "command": ["python", "x.py"], "trainer": None}, "launch per_node"),
    ],
)
def test_render_refuses_an_s3_output_the_launcher_cannot_upload(
    digits_data: Path, tmp_path: Path, target: str, extra: dict[str, Any], said: str
) -> None:
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump({k: v for k, v in _job(digits_data, **extra).items() if v is not None}))
    shown = trainctl("render", str(path), "--target", target)
    assert shown.returncode == 2, shown.stdout + shown.stderr
    assert f"output_dir: s3://{BUCKET}/runs" in shown.stderr and said in shown.stderr, shown.stderr


@pytest.mark.slow  # every upload try waits out its retries: 37 s in CI
def test_an_upload_cut_on_every_try_fails_the_attempt_naming_the_uri_and_leaves_no_complete(
    store: S3Server, digits_data: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A proxy between the run and the store cuts every PUT of the model halfway: after the launcher's tries the
    run fails, `trainctl status` names the upload and the URI, `_complete` is absent; the upload run again by hand
    (the local folder is whole) completes it, and pull then reads it."""
    for key, value in store.env().items():
        monkeypatch.setenv(key, value)
    port = int(store.endpoint.rsplit(":", 1)[1])
    proxy = DropProxy(("127.0.0.1", port), "/model.safetensors", after_bytes=4096, drops=-1, method="PUT").start()
    monkeypatch.setenv("AWS_ENDPOINT_URL", proxy.endpoint)
    try:
        run = Job.parse(_job(digits_data, output_dir=f"s3://{BUCKET}/cut")).submit("local")
        status = run.wait(timeout=300, poll=0.5)
    finally:
        proxy.stop()
    assert status.state.value == "failed", "\n".join(run.logs())[-3000:]
    dest = f"s3://{BUCKET}/cut/{run.run_uid}/"
    assert proxy.cut >= 5
    shown = trainctl("status", run.id).stdout
    assert f"output upload to {dest} failed: {dest}model.safetensors: " in shown, shown
    assert "gave up after 5 tries" in shown, shown
    s3: Any = store.client()
    keys = {i["Key"] for i in s3.list_objects_v2(Bucket=BUCKET, Prefix=f"cut/{run.run_uid}/").get("Contents", [])}
    assert f"cut/{run.run_uid}/_complete" not in keys and f"cut/{run.run_uid}/model.safetensors" not in keys
    monkeypatch.setenv("AWS_ENDPOINT_URL", store.endpoint)  # the network is back
    again = subprocess.run([sys.executable, "-m", "trainer.output_upload", str(run.paths.output_dir), dest],
                           capture_output=True, text=True, timeout=120, env=os.environ)  # fmt: skip
    assert again.returncode == 0, again.stderr
    assert trainctl("pull", run.id, str(tmp_path / "pulled")).returncode == 0
    assert (tmp_path / "pulled" / "model.safetensors").is_file()


@pytest.mark.slow  # two runs through moto S3: 35 s on 2 loaded cores
def test_checkpoints_are_mirrored_to_s3_and_a_new_run_resumes_from_the_newest_there(
    uploaded_run: UploadedRun, store: S3Server, digits_data: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """checkpoint.dir: s3://...: each published checkpoint is uploaded by rank 0 in the background (each step's
    `_complete` last); a second run, whose own folder holds none, fetches the newest one from S3 and continues;
    a third, whose checkpoints are local, continues from the prefix with `--resume-from s3://...`."""
    for key, value in store.env().items():
        monkeypatch.setenv(key, value)
    first = uploaded_run  # the first run: the module's shared one, in its own home
    assert first.state == "succeeded", first.log[-3000:]
    s3: Any = store.client()
    keys = first.ckpt_keys
    steps = sorted({k.split("/")[1] for k in keys if k.endswith("/_complete")})
    assert len(steps) >= 2 and all(f"ckpt/{s}/meta.json" in keys for s in steps), keys
    log = first.log
    assert f"-> s3://{BUCKET}/ckpt/{steps[-1]}/ (" in log, log[-3000:]

    job = _job(digits_data, checkpoint=_ckpt())  # the runs below: in this test's home, no output_dir
    job.pop("output_dir")
    job["trainer"]["epochs"] = 2
    second = Job.parse(job).submit("local")
    assert second.wait(timeout=300, poll=0.5).state.value == "succeeded", "\n".join(second.logs())[-3000:]
    log = "\n".join(second.logs())
    step = int(steps[-1].removeprefix("step-"))
    assert f"checkpoint s3://{BUCKET}/ckpt/{steps[-1]}/ fetched into" in log, log[-3000:]
    assert f"at step {step} " in log and f"fetched from s3://{BUCKET}/ckpt/{steps[-1]}/" in log, log[-3000:]

    # the same prefix as `--resume-from` of a job whose checkpoints stay on this machine: no copy by hand. The
    # second run mirrored its own steps there too: the newest is now its last
    keys = {i["Key"] for i in s3.list_objects_v2(Bucket=BUCKET, Prefix="ckpt/")["Contents"]}
    newest = max(k.split("/")[1] for k in keys if k.endswith("/_complete"))
    step = int(newest.removeprefix("step-"))
    job["checkpoint"], job["trainer"]["epochs"] = {"every_steps": 20}, 3
    path = tmp_path / "local-ckpt.yaml"
    path.write_text(yaml.safe_dump(job))
    done = trainctl("submit", str(path), "--target", "local", "--resume-from", f"s3://{BUCKET}/ckpt", "--wait",
                    "--output", "json")  # fmt: skip
    assert done.returncode == 0, (done.stdout + done.stderr)[-3000:]
    third = Run.from_id(json.loads(done.stdout)["id"])
    lineage = third.resumed_from
    assert lineage is not None and (lineage.run, lineage.target) == (f"s3://{BUCKET}/ckpt", "s3")
    assert lineage.checkpoint == f"s3://{BUCKET}/ckpt/{newest}/" and lineage.step == step, lineage
    assert lineage.copied_to.startswith(str(Path(third.paths.checkpoint_dir or "/nowhere"))), lineage
    assert f"at step {step} " in "\n".join(third.logs()), "\n".join(third.logs())[-3000:]


def test_resume_from_an_empty_or_missing_s3_prefix_submits_nothing(
    store: S3Server, digits_data: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for key, value in store.env().items():
        monkeypatch.setenv(key, value)
    job = _job(digits_data)
    job.pop("output_dir")
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(job))
    for uri, said in (
        (f"s3://{BUCKET}/nothing-here", f"no checkpoint (step-* folder) under s3://{BUCKET}/nothing-here/"),
        ("s3://no-such-bucket/ckpt", "list s3://no-such-bucket/ckpt/: S3 said NoSuchBucket"),
        ("s3://", "--resume-from s3://: not an s3://bucket/prefix URI"),
    ):
        done = trainctl("submit", str(path), "--target", "local", "--resume-from", uri)
        assert done.returncode == 2 and said in done.stderr, done.stdout + done.stderr
        assert not done.stdout.strip(), done.stdout  # no run id: nothing was submitted


def test_an_s3_checkpoint_dir_is_refused_for_a_command_job(digits_data: Path, tmp_path: Path) -> None:
    job = {"name": "cmd", "command": ["python", "train.py"], "checkpoint": {"dir": f"s3://{BUCKET}/ckpt"}}
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(job))
    shown = trainctl("render", str(path), "--target", "local")
    assert shown.returncode == 2 and f"checkpoint.dir: s3://{BUCKET}/ckpt: the built-in trainer mirrors" in shown.stderr

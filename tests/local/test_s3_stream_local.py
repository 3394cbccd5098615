"""The digits job on the local target with its training data streamed from S3 (`{uri: s3://..., mode: stream}`,
moto's server over HTTP): 2 ranks each read about 1/N of the object per pass (the server's request log: each
GET's Range, the rank in its User-Agent), nothing is staged, render says so, and the spec refuses a stream it
cannot honour, saying what to change."""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml
from run_cli import trainctl  # tests/support
from s3_server import S3Server, deleting, s3_server  # tests/support
from trainctl.errors import JobError
from trainctl.spec.job_spec import JobSpec
from trainer.s3_stream import TAIL

ROOT = Path(__file__).resolve().parents[2]
BUCKET = "digits-stream"
TRAIN = f"s3://{BUCKET}/digits/train.jsonl"


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Iterator[S3Server]:
    with s3_server(tmp_path_factory.mktemp("moto"), buckets=(BUCKET,)) as server:
        yield server


@pytest.fixture
def stream_job(tmp_path: Path, store: S3Server, digits_data: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """examples/digits.yaml with data.train streamed from S3, data.val staged, the trainer's streaming reader."""
    return store.stream_digits_job(tmp_path / "digits-stream.yaml", digits_data, BUCKET, monkeypatch.setenv)


@dataclass
class StreamRun:
    """The `stream_job` submission (`--wait`) in a TRAINCTL_HOME of its own, and what the store served it."""

    done: subprocess.CompletedProcess[str]
    home: Path
    size: int  # of train.jsonl
    served: dict[int, int]  # body bytes of train.jsonl served to each rank's reader during the run
    served_all: int  # ... to any reader


@pytest.fixture(scope="module")
def stream_run(tmp_path_factory: pytest.TempPathFactory, store: S3Server, digits_data: Path) -> StreamRun:
    """One plain `stream_job` run (data.train streamed, data.val staged), shared by the tests that read it: the
    store's request log is read right after it, before another test's `reset_log()`. Its environment is this
    process's with the store's and its home's variables laid over it; os.environ is left as it was."""
    tmp = tmp_path_factory.mktemp("stream-run")
    env = dict(os.environ)
    job = store.stream_digits_job(tmp / "digits-stream.yaml", digits_data, BUCKET, env.__setitem__)
    env["TRAINCTL_HOME"] = str(tmp / "trainctl-home")
    size = int(store.client().head_object(Bucket=BUCKET, Key="digits/train.jsonl")["ContentLength"])  # type: ignore[attr-defined]
    store.reset_log()
    done = trainctl("submit", str(job), "--target", "local", "--wait", env=env)
    served = {rank: store.bytes_served("/digits/train.jsonl", f"trainctl-rank/{rank}") for rank in (0, 1)}
    return StreamRun(done, tmp / "trainctl-home", size, served, store.bytes_served("/digits/train.jsonl"))


def test_render_says_the_input_is_streamed_and_stages_only_the_other(stream_job: Path) -> None:
    shown = trainctl("render", str(stream_job), "--target", "local")
    assert shown.returncode == 0, shown.stderr
    assert f"# data.train: {TRAIN} is streamed by each rank from S3" in shown.stdout
    assert "TRAINER_STREAM_DATA=train" in shown.stdout and f"--train-data {TRAIN}" in shown.stdout
    assert "--data-cache" in shown.stdout  # data.val is staged as before
    assert f"note: data.train: {TRAIN} is streamed: each rank reads its ~1/N share" in shown.stderr


def test_two_ranks_stream_the_digits_from_s3_each_reading_about_1_over_n(stream_run: StreamRun) -> None:
    size, done = stream_run.size, stream_run.done
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    run = next((stream_run.home / "runs").iterdir())
    log = (run / "log.txt").read_text()
    assert f"data {TRAIN} is streamed by each rank (1 object(s), {size} bytes; no copy)" in log, log[-3000:]
    summary = json.loads((run / "output" / "summary.json").read_text())
    assert summary["world_size"] == 2 and summary["val_accuracy"] > 0.5
    assert not any("train.jsonl" in str(p) for p in (stream_run.home / "data-cache").rglob("*")), "nothing staged"
    # two passes over each rank's share: the count that sizes the epoch, then the epoch itself
    for rank in (0, 1):
        served = stream_run.served[rank]
        assert 0.9 * size / 2 <= served <= 2 * 1.1 * size / 2, (rank, served, size)
    assert stream_run.served_all == sum(stream_run.served.values())  # every GET of it came from a rank's reader


@pytest.mark.slow  # two streamed inputs on 2 ranks: 50 s on 2 loaded cores
def test_validation_data_streamed_too_gives_the_staged_run_s_metrics_each_rank_reading_about_1_over_n(
    stream_run: StreamRun, stream_job: Path, store: S3Server, trainctl_home: Path
) -> None:
    """data.val streamed as well: nothing is staged, each rank is served its half of val.jsonl per pass (the count
    pass, then one evaluation), and val_loss / val_accuracy equal those of the same run with data.val staged."""
    staged = stream_run.done  # that run: stream_job as it is, in the module's shared home
    assert staged.returncode == 0, staged.stdout[-3000:] + staged.stderr[-3000:]
    job = yaml.safe_load(stream_job.read_text())
    job["data"]["val"] = {"uri": job["data"]["val"], "mode": "stream"}
    stream_job.write_text(yaml.safe_dump(job))
    store.reset_log()
    streamed = trainctl("submit", str(stream_job), "--target", "local", "--wait")  # in this test's own home
    assert streamed.returncode == 0, streamed.stdout[-3000:] + streamed.stderr[-3000:]
    runs = (next((stream_run.home / "runs").iterdir()), next((trainctl_home / "runs").iterdir()))
    first, second = (json.loads((r / "output" / "summary.json").read_text()) for r in runs)
    assert second["val_loss"] == pytest.approx(first["val_loss"], rel=1e-6), (first, second)
    assert second["val_accuracy"] == first["val_accuracy"] and second["val_accuracy"] > 0.5
    assert not [p for p in (trainctl_home / "data-cache").rglob("*") if p.is_file()], "nothing staged"
    size = int(store.client().head_object(Bucket=BUCKET, Key="digits/val.jsonl")["ContentLength"])  # type: ignore[attr-defined]
    for rank in (0, 1):  # per pass: its half, the byte before it, and past its end one TAIL piece for a line's rest
        served = store.bytes_served("/digits/val.jsonl", f"trainctl-rank/{rank}")
        assert size <= served <= 2 * (size / 2 + 1 + TAIL), (rank, served, size)


@pytest.mark.parametrize(
    ("data", "trainer", "said"),
    [
        ({"train": {"uri": "data/train.jsonl", "mode": "stream"}}, {"streaming": True}, "is no s3:// URI: drop mode"),
        ({"train": {"uri": TRAIN, "mode": "stream"}}, {}, "set trainer.streaming: true"),
        ({"train": {"uri": TRAIN, "mode": "fast"}}, {"streaming": True}, "expected stage (copy once into a cache)"),
        ({"train": {"url": TRAIN}}, {"streaming": True}, "expected a location, or {uri: <location>, mode:"),
        ({"train": TRAIN, "test": {"uri": TRAIN, "mode": "stream"}}, {}, "streams its training and validation data"),
        ({"train": TRAIN, "val": {"uri": TRAIN, "mode": "stream"}}, {"val_data": "v.jsonl"}, "or val_data); use mode"),
    ],
)
def test_the_spec_refuses_a_stream_it_cannot_honour_saying_what_to_change(
    data: dict[str, Any], trainer: dict[str, Any], said: str
) -> None:
    with pytest.raises(JobError) as caught:
        JobSpec.parse({"name": "s", "trainer": {"model": "digits", **trainer}, "data": data})
    assert said in str(caught.value), str(caught.value)


def test_a_streamed_input_round_trips_through_the_model() -> None:
    job = JobSpec.parse(
        {"name": "s", "trainer": {"streaming": True}, "data": {"train": {"uri": TRAIN, "mode": "stream"}}}
    )
    assert job.data == {"train": TRAIN} and job.data_stream == ["train"]
    assert JobSpec.parse(job.model_dump(exclude_unset=True)).data_stream == ["train"]
    assert JobSpec.parse({"name": "s", "trainer": {}, "data": {"train": {"uri": TRAIN}}}).data_stream == []
    val = {"uri": f"s3://{BUCKET}/digits/val.jsonl", "mode": "stream"}  # streamed whatever trainer.streaming says
    assert JobSpec.parse({"name": "s", "trainer": {}, "data": {"train": TRAIN, "val": val}}).data_stream == ["val"]


@pytest.mark.parametrize(
    ("target", "shown"),
    [
        (
            "slurm",
            ["export TRAINER_STREAM_DATA=train", "# data.train: s3://bkt/digits/train/ is streamed by each rank"],
        ),
        ("kubernetes", ["name: TRAINER_STREAM_DATA", "value: s3://bkt/digits/train/"]),
        ("sagemaker", ['"S3Uri": "s3://bkt/digits/train/"']),
    ],
)
def test_every_target_renders_a_streamed_input(target: str, shown: list[str]) -> None:
    from trainctl.job import Job

    job = Job.parse({
        "name": "digits", "image": "123456789012.dkr.ecr.us-east-1.amazonaws.com/trainer:1",
        "trainer": {"model": "digits", "streaming": True}, "resources": {"nodes": 2, "procs_per_node": 2},
        "data": {"train": {"uri": "s3://bkt/digits/train/", "mode": "stream"}, "val": "s3://bkt/digits/val/"},
        "slurm": {"workdir": "/shared/w"}, "kubernetes": {"pvc": "data"},
        "sagemaker": {"role_arn": "arn:aws:iam::123456789012:role/x", "output_s3_uri": "s3://bkt/out",
                      "instance_type": "ml.m5.xlarge"},
    })  # fmt: skip
    rendered = job.render(target)
    assert all(s in rendered.text for s in shown), rendered.text
    assert "is staged" not in " ".join(n for n in rendered.notes if n.startswith("data.train"))
    said = [n for n in rendered.notes if n.startswith("data.train")]
    assert len(said) == 1 and ("streamed" in said[0] or "FastFile streams it" in said[0]), rendered.notes


@pytest.mark.slow  # a run that retries each cut: 36 s in CI
@pytest.mark.parametrize("drops", [1, -1])
def test_a_connection_cut_mid_stream_is_read_again_or_fails_the_run_naming_the_uri(
    stream_job: Path, store: S3Server, trainctl_home: Path, monkeypatch: pytest.MonkeyPatch, drops: int
) -> None:
    """A proxy between the ranks and the store cuts a GET of train.jsonl 20 KB into its body: once (the rank reads
    that piece again and the run trains), or every time (the rank gives up after 5 tries, naming the URI)."""
    from s3_server import DropProxy

    port = int(store.endpoint.rsplit(":", 1)[1])
    proxy = DropProxy(("127.0.0.1", port), f"/{BUCKET}/digits/train.jsonl", after_bytes=20_000, drops=drops).start()
    monkeypatch.setenv("AWS_ENDPOINT_URL", proxy.endpoint)
    try:
        done = trainctl("submit", str(stream_job), "--target", "local", "--wait")
    finally:
        proxy.stop()
    log = (next((trainctl_home / "runs").iterdir()) / "log.txt").read_text()
    if drops == 1:
        assert done.returncode == 0 and proxy.cut == 1, done.stdout[-3000:] + log[-3000:]
        assert f"{TRAIN}: " in log and "trying again" in log, log[-3000:]
    else:
        assert done.returncode == 1, done.stdout[-3000:] + log[-3000:]
        assert f"streaming {TRAIN}: " in log and "gave up after 5 tries" in log, log[-3000:]
        assert proxy.cut >= 5


@pytest.mark.slow  # a run that fails mid-stream: 32 s on 2 loaded cores
def test_an_object_deleted_mid_stream_fails_the_attempt_with_exit_1_naming_the_uri(
    stream_job: Path, store: S3Server, trainctl_home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """train.jsonl is deleted once both ranks have listed and counted it (before the 4th GET of it: the count pass
    makes 3, rank 0's share and its last line's tail, rank 1's share). The epoch's pinned GET gets 404: the
    attempt fails (exit 1, failure.json naming the URI, cause not `invalid`), since the spec was right."""
    with deleting(store, BUCKET, "digits/train.jsonl", before_get=4) as proxy:
        monkeypatch.setenv("AWS_ENDPOINT_URL", proxy.endpoint)
        done = trainctl("submit", str(stream_job), "--target", "local", "--wait")
    run = next((trainctl_home / "runs").iterdir())
    log = (run / "log.txt").read_text()
    assert done.returncode == 1 and proxy.seen >= 4, done.stdout[-3000:] + log[-3000:]
    failure = json.loads((run / "output" / "failure.json").read_text())
    assert failure["exit_code"] == 1 and failure["exception"] == "TransferFailed", failure
    assert failure["message"].startswith(f"streaming {TRAIN}: the object was deleted (NoSuchKey)"), failure
    shown = trainctl("status", f"local:{run.name}")
    assert TRAIN in shown.stdout and "invalid" not in shown.stdout, shown.stdout

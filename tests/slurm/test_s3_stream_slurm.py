"""The digits job with its training data streamed from S3 (`{uri: s3://..., mode: stream}`, moto's server over
HTTP on 127.0.0.1) on the real local SLURM cluster, 2 nodes x 1 process: each node's launcher checks the input and
stages nothing of it, each rank reads about 1/N of the object per pass with ranged GETs (the server's request log:
each GET's Range, the rank in its User-Agent); and an object deleted mid-run fails the attempt with exit 1 naming
the URI in `trainctl status`, not `invalid`, as on local (tests/local/test_s3_stream_local.py)."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from run_cli import trainctl  # tests/support
from s3_server import S3Server, deleting, s3_server  # tests/support

pytestmark = [pytest.mark.slurm, pytest.mark.slow]
BUCKET = "digits-slurm-stream"
TRAIN = f"s3://{BUCKET}/digits/train.jsonl"


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Iterator[S3Server]:
    with s3_server(tmp_path_factory.mktemp("moto")) as server:  # the job's digits_job makes the bucket
        yield server


@pytest.fixture
def stream_job(tmp_path: Path, store: S3Server, digits_data: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """examples/digits.yaml with data.train streamed, data.val staged into the shared cache, on 2 nodes x 1."""
    slurm = {"python_env": sys.prefix, "workdir": str(tmp_path / "runs")}
    return store.stream_digits_job(
        tmp_path / "digits-stream.yaml", digits_data, BUCKET, monkeypatch.setenv,
        resources={"nodes": 2, "procs_per_node": 1}, slurm=slurm,
    )  # fmt: skip


def test_two_nodes_stream_the_digits_each_rank_reading_about_1_over_n(
    cluster: object, stream_job: Path, store: S3Server, home: Path, tmp_path: Path
) -> None:
    size = int(store.client().head_object(Bucket=BUCKET, Key="digits/train.jsonl")["ContentLength"])  # type: ignore[attr-defined]
    store.reset_log()
    done = trainctl("submit", str(stream_job), "--target", "slurm", "--wait")
    workdir = tmp_path / "runs"
    log = "".join(p.read_text() for p in workdir.glob("digits-*.out"))
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:] + log[-3000:]
    # each node's launcher checked the input and copied nothing of it
    assert log.count(f"data {TRAIN} is streamed by each rank (1 object(s), {size} bytes; no copy)") == 2, log
    assert not any("train.jsonl" in str(p) for p in (workdir / "data-cache").rglob("*")), "nothing staged"
    assert any("val.jsonl" in str(p) for p in (workdir / "data-cache").rglob("*")), "data.val staged as before"
    run_dir = next(p for p in (workdir / "runs").iterdir() if p.is_dir())
    summary = json.loads((run_dir / "output" / "summary.json").read_text())
    assert summary["world_size"] == 2 and summary["val_accuracy"] > 0.5
    # two passes over each rank's share (the count that sizes the epoch, the epoch), each ~1/N of the object
    store.assert_each_rank_read_its_share("/digits/train.jsonl", size, ranks=2, passes=2)


def test_an_object_deleted_mid_stream_fails_the_attempt_with_exit_1_naming_the_uri(
    cluster: object, stream_job: Path, store: S3Server, home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """train.jsonl is deleted once both ranks have listed and counted it (before the 4th GET of it: the count pass
    makes 3, rank 0's share and its last line's tail, rank 1's share). The epoch's pinned GET gets 404: the rank
    exits 1 and `trainctl status` names the URI from its failure record (a requeue, with `retries:`, would find the
    object gone at its launchers' check: exit 2, invalid; SLURM's requeue delay makes that 2 minutes more)."""
    with deleting(store, BUCKET, "digits/train.jsonl", before_get=4) as proxy:
        monkeypatch.setenv("AWS_ENDPOINT_URL", proxy.endpoint)
        done = trainctl("submit", str(stream_job), "--target", "slurm", "--wait")
    assert done.returncode != 0 and proxy.seen >= 4, done.stdout[-3000:] + done.stderr[-3000:]
    run_id = done.stderr.split("submitted ", 1)[1].split()[0]
    status = json.loads(trainctl("status", run_id, "--output", "json").stdout)
    said = f"TransferFailed: streaming {TRAIN}: the object was deleted (NoSuchKey) since this run listed it"
    assert status["state"] == "failed" and status["reason"].startswith("rank "), status
    assert said in status["reason"] and "(exit 1)" in status["reason"], status
    assert status["failure"]["exit_code"] == 1 and status["failure"]["exception"] == "TransferFailed", status

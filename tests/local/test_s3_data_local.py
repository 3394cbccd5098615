"""The digits job, unchanged but for its data's location, trains on the local target with its data in S3
(moto's server over HTTP): staged into $TRAINCTL_HOME/data-cache by the launcher; a second run downloads nothing
(the server's request log); render says where each input is read from; bad input exits 2 at submit."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from run_cli import trainctl  # tests/support
from s3_server import DropProxy, S3Server, s3_server  # tests/support

ROOT = Path(__file__).resolve().parents[2]
BUCKET = "digits-data"
TRAINCTL = [sys.executable, "-m", "trainctl"]


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Iterator[S3Server]:
    with s3_server(tmp_path_factory.mktemp("moto")) as server:
        yield server


@pytest.fixture
def s3_job(tmp_path: Path, store: S3Server, digits_data: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """examples/digits.yaml with `data:` pointing at the same files in S3, and this process set to reach it."""
    for key, value in store.env().items():
        monkeypatch.setenv(key, value)
    data = {"train": f"s3://{BUCKET}/digits/train.jsonl", "val": f"s3://{BUCKET}/digits/val.jsonl"}
    return store.digits_job(tmp_path / "digits-s3.yaml", digits_data, BUCKET, data, epochs=2)


def test_render_says_where_each_s3_input_is_read_from(s3_job: Path) -> None:
    shown = trainctl("render", str(s3_job), "--target", "local")
    assert shown.returncode == 0, shown.stderr
    assert '--data-cache "${TRAINCTL_RUN_DIR}/../../data-cache"' in shown.stdout
    assert f"# data.train: s3://{BUCKET}/digits/train.jsonl is staged into $TRAINCTL_HOME/data-cache" in shown.stdout
    assert f"--train-data s3://{BUCKET}/digits/train.jsonl" in shown.stdout  # the launcher swaps in the copy
    assert f"note: data.val: s3://{BUCKET}/digits/val.jsonl is staged by the launcher on this machine" in shown.stderr
    assert "testing-secret" not in shown.stdout + shown.stderr


def test_the_digits_job_trains_from_s3_and_a_second_run_downloads_nothing(
    s3_job: Path, store: S3Server, trainctl_home: Path
) -> None:
    store.reset_log()
    first = trainctl("submit", str(s3_job), "--target", "local", "--wait")
    assert first.returncode == 0, first.stdout[-3000:] + first.stderr[-3000:]
    assert store.gets(f"/{BUCKET}/digits/train.jsonl") == 1 and store.gets(f"/{BUCKET}/digits/val.jsonl") == 1
    runs = sorted((trainctl_home / "runs").iterdir())
    log = (runs[0] / "log.txt").read_text()
    cache = trainctl_home / "data-cache"
    assert f"data s3://{BUCKET}/digits/train.jsonl -> {cache}/" in log
    summary = json.loads((runs[0] / "output" / "summary.json").read_text())
    assert summary["world_size"] == 2 and summary["val_accuracy"] > 0.5

    store.reset_log()
    second = trainctl("submit", str(s3_job), "--target", "local", "--wait")
    assert second.returncode == 0, second.stdout[-3000:] + second.stderr[-3000:]
    assert store.gets("/digits/") == 0, store.requests()  # HEADs name the versions; nothing is downloaded
    log = (sorted((trainctl_home / "runs").iterdir())[1] / "log.txt").read_text()
    assert "the cached copy verified" in log and "testing-secret" not in log


@pytest.mark.parametrize(
    ("uri", "said"),
    [
        (f"s3://{BUCKET}/digits/missing.jsonl", "no such object"),
        ("s3://no-such-bucket-q/digits/train.jsonl", "no such bucket"),
    ],
)
def test_a_missing_object_or_bucket_exits_2_at_submit_naming_the_uri(s3_job: Path, uri: str, said: str) -> None:
    job = yaml.safe_load(s3_job.read_text())
    job["data"]["train"] = uri
    s3_job.write_text(yaml.safe_dump(job))
    done = trainctl("submit", str(s3_job), "--target", "local")
    assert done.returncode == 2, done.stdout + done.stderr
    assert uri in done.stderr and said in done.stderr


def test_no_credentials_here_exits_2_at_submit_saying_what_to_set(
    s3_job: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("AWS_ACCESS_KEY_ID")
    monkeypatch.delenv("AWS_SECRET_ACCESS_KEY")
    done = trainctl("submit", str(s3_job), "--target", "local")
    assert done.returncode == 2, done.stdout + done.stderr
    assert f"data.train: s3://{BUCKET}/digits/train.jsonl: no AWS credentials found here" in done.stderr
    assert "AWS_ACCESS_KEY_ID" in done.stderr


def test_a_connection_cut_mid_download_on_every_try_fails_the_run_naming_the_uri_and_caches_nothing(
    s3_job: Path, store: S3Server, trainctl_home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A proxy between the run and the store cuts every download of train.jsonl halfway: boto3's transfer manager
    and the launcher retry (with backoff), then the run fails naming the URI, and the cache holds no entry for it
    and nothing partial. A cut that stops recovers (tests/trainer/test_data_cache.py)."""
    port = int(store.endpoint.rsplit(":", 1)[1])
    size = store.client().head_object(Bucket=BUCKET, Key="digits/train.jsonl")["ContentLength"]  # type: ignore[attr-defined]
    proxy = DropProxy(("127.0.0.1", port), f"/{BUCKET}/digits/train.jsonl", after_bytes=size // 2, drops=-1).start()
    monkeypatch.setenv("AWS_ENDPOINT_URL", proxy.endpoint)
    try:
        done = trainctl("submit", str(s3_job), "--target", "local", "--wait")
    finally:
        proxy.stop()
    assert done.returncode == 1, done.stdout + done.stderr
    log = (next((trainctl_home / "runs").iterdir()) / "log.txt").read_text()
    assert f"error: s3://{BUCKET}/digits/train.jsonl: " in log and "gave up after 5 tries" in log, log[-3000:]
    assert proxy.cut >= 5
    run_id = done.stderr.split("submitted ", 1)[1].split()[0] if "submitted " in done.stderr else done.stdout.split()[1]
    status = trainctl("status", run_id).stdout
    assert f"s3://{BUCKET}/digits/train.jsonl" in status, status
    cache = trainctl_home / "data-cache"
    left = sorted(p.name for p in cache.iterdir())
    assert all(name.endswith(".lock") or (cache / name / "manifest.json").is_file() for name in left), left
    entries = [json.loads((cache / n / "manifest.json").read_text())["uri"] for n in left if not n.endswith(".lock")]
    assert f"s3://{BUCKET}/digits/train.jsonl" not in entries

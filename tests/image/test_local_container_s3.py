"""`local.container` with S3 (docs/data.md): the digits job in the trainer image (tests/conftest.py builds it) reads
its data from S3 (moto's server over HTTP on this machine) staged into the container's own cache, mirrors its
checkpoints and uploads its output there. The runner's AWS variables reach the container by name (`--env NAME`),
never as values in an argv; a second run downloads nothing; a streamed input is read by each rank from S3."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from digits import make_digits  # tests/support
from s3_server import KEYS, S3Server, s3_server  # tests/support
from trainctl import Job

pytestmark = pytest.mark.slow
REPO = Path(__file__).resolve().parents[2]
DATA, OUT = "digits-in", "digits-out"


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Iterator[S3Server]:
    digits = make_digits(tmp_path_factory.mktemp("digits"))
    with s3_server(tmp_path_factory.mktemp("moto"), buckets=(OUT,)) as server:
        server.put_digits(digits, DATA)
        yield server


def _job(trainer_image: Any, stream: bool = False) -> Job:
    job = yaml.safe_load((REPO / "examples" / "digits.yaml").read_text())
    job["data"] = {"train": f"s3://{DATA}/digits/train.jsonl", "val": f"s3://{DATA}/digits/val.jsonl"}
    if stream:  # data.train read by each rank's streaming reader (trainer/s3_stream.py), data.val staged
        job["data"]["train"] = {"uri": job["data"]["train"], "mode": "stream"}
        job["trainer"]["streaming"] = True
    job["trainer"]["epochs"] = 1
    ckpt = f"s3://{OUT}/ckpt-stream" if stream else f"s3://{OUT}/ckpt"  # its own: no resume from the other test's
    job |= {"output_dir": f"s3://{OUT}/runs", "checkpoint": {"dir": ckpt, "every_steps": 20},
            "image": trainer_image.ref, "local": {"container": trainer_image.runtime}}  # fmt: skip
    return Job.parse(job)


def test_digits_in_the_image_reads_its_data_from_s3_and_writes_its_output_and_checkpoints_there(
    trainer_image: Any, store: S3Server, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    home = tmp_path / "home"
    monkeypatch.setenv("TRAINCTL_HOME", str(home))
    for key, value in store.env().items():
        monkeypatch.setenv(key, value)
    store.reset_log()
    run = _job(trainer_image).submit("local")
    final = run.wait(timeout=600, poll=1.0)
    log = "\n".join(run.logs())
    assert final.state.value == "succeeded", log[-3000:]
    assert f"data s3://{DATA}/digits/train.jsonl -> /workspace/data-cache/" in log, log[-3000:]
    assert store.gets(f"/{DATA}/digits/train.jsonl") == 1 and store.gets(f"/{DATA}/digits/val.jsonl") == 1
    cache = home / "data-cache-container"
    assert cache.stat().st_uid == 10001 and any(cache.iterdir()), "the container's own cache, its user's"
    assert not (home / "data-cache").exists(), "the process runs' cache is not touched"

    s3: Any = store.client()
    out = {o["Key"] for o in s3.list_objects_v2(Bucket=OUT, Prefix=f"runs/{run.run_uid}/")["Contents"]}
    assert {f"runs/{run.run_uid}/{n}" for n in ("_complete", "model.safetensors", "summary.json")} <= out, out
    ckpt = {o["Key"] for o in s3.list_objects_v2(Bucket=OUT, Prefix="ckpt/")["Contents"]}
    assert any(k.endswith("/_complete") and "/step-" in k for k in ckpt), ckpt
    summary = json.loads(s3.get_object(Bucket=OUT, Key=f"runs/{run.run_uid}/summary.json")["Body"].read())
    assert summary["world_size"] == 2 and summary["val_accuracy"] > 0.5, summary

    argv = _job(trainer_image).render("local").native["argv"]
    assert "AWS_SECRET_ACCESS_KEY" in argv and argv[argv.index("AWS_SECRET_ACCESS_KEY") - 1] == "--env"
    spec = (Path(run.paths.output_dir or "").parent / "spec.json").read_text()
    assert KEYS["AWS_SECRET_ACCESS_KEY"] not in spec + log + " ".join(argv), "a key's value is in no argv, no log"

    store.reset_log()
    again = _job(trainer_image).submit("local")
    assert again.wait(timeout=600, poll=1.0).state.value == "succeeded", "\n".join(again.logs())[-3000:]
    assert store.gets(f"/{DATA}/digits/") == 0, "the second run reads the container's cache"


def test_a_streamed_input_is_read_from_s3_by_each_rank_in_the_container(
    trainer_image: Any, store: S3Server, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`{uri: s3://..., mode: stream}` in the container: the ranks get the same AWS variables by name and read
    their ~1/N share of train.jsonl straight from S3; nothing of it is staged into the container's cache."""
    home = tmp_path / "home"
    monkeypatch.setenv("TRAINCTL_HOME", str(home))
    for key, value in store.env().items():
        monkeypatch.setenv(key, value)
    train = f"s3://{DATA}/digits/train.jsonl"
    size = int(store.client().head_object(Bucket=DATA, Key="digits/train.jsonl")["ContentLength"])  # type: ignore[attr-defined]
    store.reset_log()
    run = _job(trainer_image, stream=True).submit("local")
    final = run.wait(timeout=600, poll=1.0)
    log = "\n".join(run.logs())
    assert final.state.value == "succeeded", log[-3000:]
    assert f"data {train} is streamed by each rank (1 object(s), {size} bytes; no copy)" in log, log[-3000:]
    # two passes over each rank's share: the count that sizes the epoch, then the one epoch (docs/data.md)
    store.assert_each_rank_read_its_share(f"/{DATA}/digits/train.jsonl", size, ranks=2, passes=2)
    staged = {p.name for p in (home / "data-cache-container").glob("*/data/*")}
    assert staged == {"val.jsonl"}, f"nothing of the streamed input is staged: {staged}"
    summary = run.summary()
    assert summary is not None and summary["world_size"] == 2 and summary["val_accuracy"] > 0.5, summary
    assert summary["resumed_from"] is None and summary["steps"] == 22, summary

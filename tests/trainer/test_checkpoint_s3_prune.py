"""`keep_checkpoints` on the S3 mirror (trainer/checkpoint/s3.py `Mirror`), against moto's server over HTTP: after
each upload, this run's steps beyond its newest `keep` are deleted from the prefix, `_complete` first; another
run's steps in the same prefix (shared on purpose) and a checkpoint fetched from there stay."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from s3_server import S3Server, s3_server  # tests/support
from trainer import output_upload
from trainer.checkpoint import s3 as checkpoint_s3

BUCKET = "ckpt-prune"


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Iterator[S3Server]:
    with s3_server(tmp_path_factory.mktemp("moto"), buckets=(BUCKET,)) as server:
        yield server


def _step(root: Path, step: int) -> Path:
    folder = root / f"step-{step:08d}"
    (folder / "shards").mkdir(parents=True)
    (folder / "meta.json").write_text(f'{{"step": {step}}}')
    (folder / "shards" / "model.pt").write_bytes(bytes([step % 256]) * 1000)
    return folder


def _keys(store: S3Server) -> set[str]:
    s3: Any = store.client()
    return {i["Key"] for i in s3.list_objects_v2(Bucket=BUCKET, Prefix="ck/").get("Contents", [])}


def test_this_runs_uploads_beyond_keep_are_removed_and_no_one_elses(
    store: S3Server, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for key, value in store.env().items():
        monkeypatch.setenv(key, value)
    said: list[str] = []
    monkeypatch.setenv(output_upload.UID_ENV, "a" * 32)  # another run wrote step 5 into the shared prefix
    other = checkpoint_s3.Mirror(f"s3://{BUCKET}/ck/", said.append, keep=1)
    other.publish(_step(tmp_path / "other", 5))
    other.drain()

    monkeypatch.setenv(output_upload.UID_ENV, "b" * 32)
    mirror = checkpoint_s3.Mirror(f"s3://{BUCKET}/ck/", said.append, keep=2)
    for step in (10, 20, 30, 40):
        mirror.publish(_step(tmp_path / "mine", step))
    mirror.drain()
    steps = {k.split("/")[1] for k in _keys(store) if k.endswith("/_complete")}
    assert steps == {"step-00000005", "step-00000030", "step-00000040"}, (steps, said)
    assert not any(k.startswith(("ck/step-00000010/", "ck/step-00000020/")) for k in _keys(store)), _keys(store)
    assert f"checkpoint s3://{BUCKET}/ck/step-00000020/ removed from S3 (keep_checkpoints 2)" in said, said
    assert not any("WARNING" in line for line in said), said

    # a new attempt of the same run (the same uid) prunes what its earlier attempt left
    again = checkpoint_s3.Mirror(f"s3://{BUCKET}/ck/", said.append, keep=1)
    again.publish(_step(tmp_path / "mine2", 50))
    again.drain()
    steps = {k.split("/")[1] for k in _keys(store) if k.endswith("/_complete")}
    assert steps == {"step-00000005", "step-00000050"}, (steps, said)

    # keep 0 (or none given): nothing removed
    keeps_all = checkpoint_s3.Mirror(f"s3://{BUCKET}/ck/", said.append)
    keeps_all.publish(_step(tmp_path / "mine3", 60))
    keeps_all.drain()
    assert {"step-00000050", "step-00000060"} <= {k.split("/")[1] for k in _keys(store)}

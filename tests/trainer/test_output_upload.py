"""A run's output folder uploaded to `output_dir: s3://...` (trainer/output_upload.py), against moto's server over
HTTP: every file under `<prefix>/<run uid>/`, verified, `_complete` last; an earlier attempt's `_complete` gone
while a new attempt uploads; a connection cut mid-upload every time fails naming the URI with no `_complete`,
and the upload run again completes it; the launcher's step after an attempt records what failed."""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from s3_server import DropProxy, S3Server, s3_server  # tests/support
from trainer import output_upload

BUCKET = "out-bucket"
BIG = os.urandom(2 * 1024 * 1024 + 5)  # one PUT (under the 8 MiB multipart threshold), cut mid-body


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Iterator[S3Server]:
    with s3_server(tmp_path_factory.mktemp("moto"), buckets=(BUCKET,)) as server:
        yield server


def _output(tmp_path: Path) -> Path:
    out = tmp_path / "output"
    (out / "tensorboard").mkdir(parents=True)
    (out / "model.pt").write_bytes(BIG)
    (out / "model.json").write_text('{"model": "digits"}\n')
    (out / "summary.json").write_text('{"steps": 3}\n')
    (out / "tensorboard" / "events.out").write_bytes(b"tb")
    return out


def _keys(store: S3Server, prefix: str) -> list[str]:
    s3: Any = store.client()
    listed = s3.list_objects_v2(Bucket=BUCKET, Prefix=prefix).get("Contents", [])
    return sorted(item["Key"] for item in listed)


def test_the_output_folder_lands_under_the_run_uid_verified_with_complete_last(
    aws_env: S3Server, tmp_path: Path
) -> None:
    out = _output(tmp_path)
    dest = output_upload.destination(f"s3://{BUCKET}/runs", {"TRAINCTL_RUN_UID": "a" * 32})
    assert dest == f"s3://{BUCKET}/runs/{'a' * 32}/"
    said: list[str] = []
    done = output_upload.upload(out, dest, said.append, exit_code=0)
    assert done.files == 4 and done.size == len(BIG) + 20 + 13 + 2
    prefix = f"runs/{'a' * 32}/"
    assert _keys(aws_env, prefix) == [prefix + k for k in
                                      ("_complete", "model.json", "model.pt", "summary.json", "tensorboard/events.out")]  # fmt: skip
    s3: Any = aws_env.client()
    manifest = json.loads(s3.get_object(Bucket=BUCKET, Key=prefix + "_complete")["Body"].read())
    assert manifest["files"]["model.pt"] == {"size": len(BIG), "sha256": hashlib.sha256(BIG).hexdigest()}
    assert manifest["exit_code"] == 0
    assert s3.get_object(Bucket=BUCKET, Key=prefix + "model.pt")["Body"].read() == BIG
    # S3 computed the SHA256 the upload asked for (ChecksumAlgorithm), and the check compared it
    head = s3.head_object(Bucket=BUCKET, Key=prefix + "model.pt", ChecksumMode="ENABLED")
    assert head["ChecksumSHA256"]


def test_a_connection_cut_mid_upload_leaves_no_complete_and_the_upload_again_completes_it(
    aws_env: S3Server, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    out = _output(tmp_path)
    dest = f"s3://{BUCKET}/cut/run1/"
    s3: Any = aws_env.client()
    s3.put_object(Bucket=BUCKET, Key="cut/run1/_complete", Body=b"{}")  # an earlier attempt's, now stale
    port = int(aws_env.endpoint.rsplit(":", 1)[1])
    proxy = DropProxy(("127.0.0.1", port), "/cut/run1/model.pt", after_bytes=len(BIG) // 2, drops=-1, method="PUT")
    monkeypatch.setenv("AWS_ENDPOINT_URL", proxy.start().endpoint)
    said: list[str] = []
    try:
        with pytest.raises(output_upload.TransferFailed, match=f"{dest} failed: s3://{BUCKET}/cut/run1/model.pt: .*"
                           "gave up after 2 tries.*_complete not written"):  # fmt: skip
            output_upload.upload(out, dest, said.append, attempts=2, backoff_s=0.05)
    finally:
        proxy.stop()
    assert proxy.cut >= 2
    assert "cut/run1/_complete" not in _keys(aws_env, "cut/run1/")  # the stale manifest went first
    assert "cut/run1/model.pt" not in _keys(aws_env, "cut/run1/")  # a cut PUT is no object
    monkeypatch.setenv("AWS_ENDPOINT_URL", aws_env.endpoint)
    assert output_upload.main([str(out), dest]) == 0
    assert "cut/run1/_complete" in _keys(aws_env, "cut/run1/")
    assert s3.get_object(Bucket=BUCKET, Key="cut/run1/model.pt")["Body"].read() == BIG


def test_after_an_attempt_a_failed_upload_fails_a_good_attempt_naming_the_uri(
    aws_env: S3Server, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    out = _output(tmp_path)
    monkeypatch.setenv("TRAINER_OUTPUT_DIR", str(out))
    monkeypatch.setenv("TRAINCTL_RUN_UID", "b" * 32)
    said: list[str] = []
    assert output_upload.after_attempt("s3://no-such-bucket-out/p", 0, said.append) == 1
    failure = json.loads((out / "failure.json").read_text())
    assert failure["source"] == "launcher" and "s3://no-such-bucket-out/p/" in failure["message"]
    assert "no such bucket" in failure["message"]
    # an attempt that failed already keeps its own exit code (its cause), and still uploads what it has
    (out / "failure.json").unlink()
    assert output_upload.after_attempt(f"s3://{BUCKET}/kept", 143, said.append) == 143
    assert f"kept/{'b' * 32}/_complete" in _keys(aws_env, "kept/")
    assert any(line.startswith("output ") and "_complete written" in line for line in said)


def test_a_file_over_the_multipart_threshold_uploads_in_parts_and_verifies_by_size(
    aws_env: S3Server, tmp_path: Path
) -> None:
    """Over boto3's 8 MiB threshold upload_file sends parts; S3's SHA256 is then over the parts (COMPOSITE), so the
    check is the size (s3_objects.from_head), and the manifest's sha256 is the file's own."""
    out = tmp_path / "big"
    out.mkdir()
    body = os.urandom(9 * 1024 * 1024 + 3)
    (out / "model.safetensors").write_bytes(body)
    aws_env.reset_log()
    done = output_upload.upload(out, f"s3://{BUCKET}/multi/", lambda _: None)
    assert done.files == 1 and done.size == len(body)
    assert sum(1 for method, path in aws_env.requests() if method == "PUT" and "model.safetensors" in path) >= 2
    s3: Any = aws_env.client()
    assert s3.get_object(Bucket=BUCKET, Key="multi/model.safetensors")["Body"].read() == body
    manifest = json.loads(s3.get_object(Bucket=BUCKET, Key="multi/_complete")["Body"].read())
    assert manifest["files"]["model.safetensors"]["sha256"] == hashlib.sha256(body).hexdigest()

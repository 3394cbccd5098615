"""s3:// inputs staged into the verified cache (trainer/launcher/data_cache.py), against moto's server over HTTP: an
object and a prefix staged once, a second stage downloading nothing (the server's request log), a corrupt entry
fetched again, a connection cut mid-download recovered or failed naming the URI with nothing partial cached,
bad input (missing bucket or object, refused keys) as TrainerInputError, and two stagers sharing one copy."""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from s3_server import DropProxy, S3Server, s3_server  # tests/support
from trainer import s3_digests, s3_objects
from trainer.errors import TrainerInputError
from trainer.launcher import data_cache

BUCKET = "data-bucket"
BIG = os.urandom(3 * 1024 * 1024 + 17)  # under boto3's 8 MiB multipart threshold: one GET, cut mid-body


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Iterator[S3Server]:
    with s3_server(tmp_path_factory.mktemp("moto")) as server:
        s3: Any = server.client()
        s3.create_bucket(Bucket=BUCKET)
        s3.put_object(Bucket=BUCKET, Key="one/big.bin", Body=BIG)
        s3.put_object(Bucket=BUCKET, Key="set/a.jsonl", Body=b'{"x": 1}\n')
        s3.put_object(Bucket=BUCKET, Key="set/sub/b.jsonl", Body=b'{"x": 2}\n')
        s3.put_object(Bucket=BUCKET, Key="set/", Body=b"")  # a console's folder marker: not a file
        yield server


def _said() -> tuple[list[str], Any]:
    lines: list[str] = []
    return lines, lines.append


def _files(cache: Path) -> list[str]:
    return sorted(str(p.relative_to(cache)) for p in cache.rglob("*") if p.is_file())


def test_an_object_is_staged_once_verified_and_a_second_stage_downloads_nothing(
    aws_env: S3Server, tmp_path: Path
) -> None:
    cache = tmp_path / "cache"
    _, say = _said()
    aws_env.reset_log()
    first = data_cache.stage(f"s3://{BUCKET}/one/big.bin", cache, say)
    assert first.fetched and first.path.name == "big.bin" and first.path.read_bytes() == BIG
    assert aws_env.gets(f"/{BUCKET}/one/big.bin") >= 1
    heads = [m for m, path in aws_env.requests() if m == "HEAD" and path.endswith("/one/big.bin")]
    assert heads == ["HEAD"], heads  # the listing's; the transfer manager is given its size and ETag
    aws_env.reset_log()
    again = data_cache.stage(f"s3://{BUCKET}/one/big.bin", cache, say)
    assert not again.fetched and again.path == first.path
    assert aws_env.gets(f"/{BUCKET}/one/big.bin") == 0  # a HEAD for the identity, no GET
    assert not [p for p in cache.iterdir() if p.name.startswith(".tmp-")]


def test_a_prefix_stages_all_its_objects_and_a_changed_object_is_a_new_entry(aws_env: S3Server, tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    _, say = _said()
    staged = data_cache.stage(f"s3://{BUCKET}/set/", cache, say)
    assert staged.path.is_dir() and staged.files == 2
    assert sorted(str(p.relative_to(staged.path)) for p in staged.path.rglob("*") if p.is_file()) == [
        "a.jsonl", "sub/b.jsonl",
    ]  # fmt: skip
    no_slash = data_cache.stage(f"s3://{BUCKET}/set", cache, say)  # a key with objects under key/ is a prefix
    assert no_slash.path.is_dir() and no_slash.files == 2
    s3: Any = aws_env.client()
    s3.put_object(Bucket=BUCKET, Key="set/a.jsonl", Body=b'{"x": 3}\n')
    changed = data_cache.stage(f"s3://{BUCKET}/set/", cache, say)
    assert (
        changed.fetched and changed.entry != staged.entry and (changed.path / "a.jsonl").read_bytes() == b'{"x": 3}\n'
    )
    s3.put_object(Bucket=BUCKET, Key="set/a.jsonl", Body=b'{"x": 1}\n')


def test_an_object_replaced_after_it_was_listed_fails_and_caches_nothing(aws_env: S3Server, tmp_path: Path) -> None:
    """The download is pinned (If-Match) to the version the entry is named by: a replacement between the listing
    and the GET, of the same size (which the size check alone would pass), is never published under the old name."""
    other: Any = aws_env.client()
    s3: Any = s3_objects.client()
    replaced = []

    def replace(**_kwargs: Any) -> None:
        if not replaced:
            replaced.append(other.put_object(Bucket=BUCKET, Key="one/big.bin", Body=bytes(len(BIG))))

    s3.meta.events.register("before-call.s3.GetObject", replace)
    cache = tmp_path / "cache"
    _, say = _said()
    try:
        with pytest.raises(data_cache.TransferFailed, match=f"s3://{BUCKET}/one/big.bin: the object was replaced"):
            data_cache.stage(f"s3://{BUCKET}/one/big.bin", cache, say, s3=s3, backoff_s=0.05)
        assert replaced and all(name.endswith(".lock") for name in _files(cache)), _files(cache)
    finally:
        other.put_object(Bucket=BUCKET, Key="one/big.bin", Body=BIG)


def test_a_corrupt_entry_is_detected_and_fetched_again(aws_env: S3Server, tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    lines, say = _said()
    first = data_cache.stage(f"s3://{BUCKET}/one/big.bin", cache, say)
    with first.path.open("r+b") as f:  # one flipped byte, same size
        f.seek(1000)
        byte = f.read(1)
        f.seek(1000)
        f.write(bytes([byte[0] ^ 0xFF]))
    aws_env.reset_log()
    again = data_cache.stage(f"s3://{BUCKET}/one/big.bin", cache, say)
    assert again.fetched and hashlib.sha256(again.path.read_bytes()).digest() == hashlib.sha256(BIG).digest()
    assert aws_env.gets(f"/{BUCKET}/one/big.bin") >= 1
    assert any("is corrupt (big.bin part 1 (bytes 0-" in line for line in lines), lines


def test_a_connection_cut_mid_download_is_recovered(
    aws_env: S3Server, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    port = int(aws_env.endpoint.rsplit(":", 1)[1])
    proxy = DropProxy(("127.0.0.1", port), f"/{BUCKET}/one/big.bin", after_bytes=len(BIG) // 2, drops=2).start()
    monkeypatch.setenv("AWS_ENDPOINT_URL", proxy.endpoint)
    try:
        cache = tmp_path / "cache"
        _, say = _said()
        staged = data_cache.stage(f"s3://{BUCKET}/one/big.bin", cache, say, backoff_s=0.05)
        assert proxy.cut == 2 and staged.path.read_bytes() == BIG
    finally:
        proxy.stop()


def test_a_connection_cut_every_time_fails_naming_the_uri_and_caches_nothing(
    aws_env: S3Server, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    port = int(aws_env.endpoint.rsplit(":", 1)[1])
    proxy = DropProxy(("127.0.0.1", port), f"/{BUCKET}/one/big.bin", after_bytes=len(BIG) // 2, drops=-1).start()
    monkeypatch.setenv("AWS_ENDPOINT_URL", proxy.endpoint)
    try:
        cache = tmp_path / "cache"
        _, say = _said()
        with pytest.raises(data_cache.TransferFailed, match=f"s3://{BUCKET}/one/big.bin: .*gave up after 2 tries"):
            data_cache.stage(f"s3://{BUCKET}/one/big.bin", cache, say, attempts=2, backoff_s=0.05)
        assert proxy.cut >= 2
        assert all(name.endswith(".lock") for name in _files(cache)), _files(cache)  # nothing partial, no entry
    finally:
        proxy.stop()


@pytest.mark.parametrize(
    ("uri", "env", "said"),
    [
        ("s3://no-such-bucket-x/k", {}, "no such bucket"),
        (f"s3://{BUCKET}/one/missing.bin", {}, "no such object"),
        (f"s3://{BUCKET}/nothing-here/", {}, "no objects under this prefix"),
        (f"s3://{BUCKET}/one/big.bin", {"AWS_ACCESS_KEY_ID": "", "AWS_SECRET_ACCESS_KEY": ""}, "no AWS credentials"),
    ],
)
def test_bad_input_names_the_uri_and_what_to_do(
    aws_env: S3Server, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, uri: str, env: dict[str, str], said: str
) -> None:
    for key, value in env.items():
        monkeypatch.delenv(key) if not value else monkeypatch.setenv(key, value)
    with pytest.raises(TrainerInputError, match=said) as caught:
        data_cache.stage(uri, tmp_path / "cache", lambda _: None, attempts=1)
    assert str(caught.value).startswith(f"{uri}: ") and "testing-secret" not in str(caught.value)


STAGE = (
    "import sys; from pathlib import Path; from trainer.launcher import data_cache; "
    "s = data_cache.stage(sys.argv[1], Path(sys.argv[2]), lambda m: print(m, file=sys.stderr, flush=True)); "
    "print(s.path, s.fetched)"
)


def test_two_stagers_at_once_download_one_copy(aws_env: S3Server, tmp_path: Path) -> None:
    """As two SLURM nodes over one shared cache folder: while the entry's lock is held (here by the test), both
    wait; then one stages and the other reads the same published copy (one download in the server's log)."""
    import fcntl

    uri = f"s3://{BUCKET}/one/big.bin"
    cache = tmp_path / "shared-cache"
    cache.mkdir()
    key = data_cache.entry_name(uri, s3_objects.objects(aws_env.client(), s3_objects.parse(uri)))
    aws_env.reset_log()
    with (cache / f"{key}.lock").open("w") as held:
        fcntl.lockf(held, fcntl.LOCK_EX)
        argv = [sys.executable, "-c", STAGE, uri, str(cache)]
        procs = [subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _ in range(2)]
        assert procs[0].stderr is not None and procs[1].stderr is not None
        for p in procs:  # each says it waits for the other's copy
            assert "another process is staging it" in p.stderr.readline()
        assert aws_env.gets(f"/{BUCKET}/one/big.bin") == 0
    results = [p.communicate(timeout=120)[0].split() for p in procs]
    assert all(p.returncode == 0 for p in procs)
    assert {path for path, _ in results} == {results[0][0]} and sorted(f for _, f in results) == ["False", "True"]
    assert aws_env.gets(f"/{BUCKET}/one/big.bin") == 1


def test_the_launcher_stages_inputs_and_hands_the_program_local_paths(aws_env: S3Server, tmp_path: Path) -> None:
    uri = f"s3://{BUCKET}/set/"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TRAINER_", "SLURM_", "PET_"))}
    env.update(TRAINER_DATA_TRAIN=uri, TRAINER_SAGEMAKER_ROOT=str(tmp_path / "none"))
    show = "import os, sys; print('ARGV', sys.argv[1]); print('ENV', os.environ['TRAINER_DATA_TRAIN'])"
    done = subprocess.run(
        [sys.executable, "-m", "trainer.launch", "--platform", "local", "--launch", "per_node",
         "--data-cache", str(tmp_path / "cache"), "--", sys.executable, "-c", show, uri],
        env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    argv = done.stdout.split("ARGV ", 1)[1].split()[0]
    assert f"ENV {argv}" in done.stdout and argv.startswith(str(tmp_path / "cache")) and Path(argv, "a.jsonl").is_file()
    assert f"data {uri} -> {argv} (fetched 2 object(s)" in done.stderr
    assert "testing-secret" not in done.stderr + done.stdout


def test_a_denied_read_and_refused_keys_are_bad_input_naming_the_uri(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """moto checking keys and IAM policies (after the 5 set-up requests): a user allowed only s3:ListBucket is
    denied the object; unknown keys are refused. Both are the user's to fix (exit 2), said with the URI; the
    SDK's submit-time check (trainctl/targets/s3_inputs.py) says the same before anything runs."""
    import json as _json

    from trainctl.targets.s3_inputs import problems

    with s3_server(tmp_path, auth_after=5) as server:
        s3: Any = server.client()
        s3.create_bucket(Bucket="locked")
        s3.put_object(Bucket="locked", Key="k.bin", Body=b"secret data")
        iam = boto3_client(server, "iam")
        iam.create_user(UserName="lister")
        key = iam.create_access_key(UserName="lister")["AccessKey"]
        policy = {
            "Version": "2012-10-17",
            "Statement": [{"Effect": "Allow", "Action": "s3:ListBucket", "Resource": "*"}],
        }
        iam.put_user_policy(UserName="lister", PolicyName="list-only", PolicyDocument=_json.dumps(policy))
        for name, value in server.env().items():
            monkeypatch.setenv(name, value)
        monkeypatch.setenv("AWS_ACCESS_KEY_ID", key["AccessKeyId"])
        monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", key["SecretAccessKey"])
        with pytest.raises(
            TrainerInputError, match=r"^s3://locked/k.bin: access denied; the credentials need s3:GetObject"
        ):
            data_cache.stage("s3://locked/k.bin", tmp_path / "cache", lambda _: None, attempts=1)
        assert problems({"train": "s3://locked/k.bin"}, here_reads_it=True) == [
            "data.train: s3://locked/k.bin: access denied; the credentials need s3:GetObject and s3:ListBucket on it"
        ]
        assert problems({"train": "s3://locked/k.bin"}, here_reads_it=False) == []  # the nodes may have a role
        monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AKIAUNKNOWNKEY000000")
        with pytest.raises(TrainerInputError, match=r"^s3://locked/k.bin: the store refused the credentials"):
            data_cache.stage("s3://locked/k.bin", tmp_path / "cache", lambda _: None, attempts=1)
        assert problems({"train": "s3://locked/k.bin"}, here_reads_it=True) == [
            "data.train: s3://locked/k.bin: the store refused the credentials (InvalidAccessKeyId); check the keys "
            "or the profile"
        ]
        assert not list((tmp_path / "cache").glob(".tmp-*"))


def boto3_client(server: S3Server, service: str) -> Any:
    import boto3

    keys = server.env()
    session = boto3.session.Session(aws_access_key_id=keys["AWS_ACCESS_KEY_ID"],
                                    aws_secret_access_key=keys["AWS_SECRET_ACCESS_KEY"], region_name="us-east-1")  # fmt: skip
    return session.client(service, endpoint_url=server.endpoint)


def test_the_checksum_s3_gives_is_what_a_download_is_checked_against(aws_env: S3Server, tmp_path: Path) -> None:
    """An object uploaded with a SHA256 checksum: HEAD (ChecksumMode=ENABLED) gives it, and a file with the same
    size but other bytes does not verify; a multipart object (over boto3's 8 MiB threshold: ranged GETs) stages
    and verifies by size (its ETag is no MD5)."""
    s3: Any = aws_env.client()
    body = b'{"x": 1}\n' * 1000
    s3.put_object(Bucket=BUCKET, Key="sum/a.jsonl", Body=body, ChecksumAlgorithm="SHA256")
    (obj,) = s3_objects.objects(s3, s3_objects.parse(f"s3://{BUCKET}/sum/a.jsonl"))
    assert obj.checksum is not None and obj.checksum[0] == "SHA256" and obj.md5_etag is True
    other = tmp_path / "other"
    other.write_bytes(body[:-2] + b"!\n")
    why = s3_objects.mismatch(obj, other, s3_digests.file_digests(other))
    assert why is not None and why.startswith("SHA256 ")
    same = tmp_path / "same"
    same.write_bytes(body)
    assert s3_objects.mismatch(obj, same, s3_digests.file_digests(same)) is None

    big = os.urandom(9 * 1024 * 1024 + 5)
    src = tmp_path / "big.bin"
    src.write_bytes(big)
    s3.upload_file(str(src), BUCKET, "multi/big.bin")  # boto3 uploads it in parts
    (multi,) = s3_objects.objects(s3, s3_objects.parse(f"s3://{BUCKET}/multi/big.bin"))
    assert "-" in multi.etag and multi.checksum is None  # moto gives its parts' CRC32 with no ChecksumType
    aws_env.reset_log()
    staged = data_cache.stage(f"s3://{BUCKET}/multi/big.bin", tmp_path / "cache", lambda _: None)
    assert staged.path.read_bytes() == big and aws_env.gets(f"/{BUCKET}/multi/big.bin") >= 2  # ranged GETs

"""The rank-sharded reader streaming straight from S3 (trainer/s3_stream.py, `mode: stream`), against moto's server
over HTTP: each rank gets exactly the lines it gets from the same bytes on disk, the store sends each rank about
1/N of the bytes (its request log: each GET's Range, the rank in its User-Agent), a connection cut mid-body is
read again from where it stopped, a cut on every try or an object changed mid-stream fails naming the URI, and bad
input names the URI."""

from __future__ import annotations

import json
import random
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from s3_server import DropProxy, S3Server, s3_server  # tests/support
from trainer import s3_stream
from trainer.data.streaming import ShardedJsonlReader
from trainer.errors import TrainerInputError

BUCKET = "stream-bucket"


def _jsonl(seed: int, lines: int) -> bytes:
    rng = random.Random(seed)
    rows = [{"x": [rng.random() for _ in range(rng.randint(1, 12))], "y": rng.randint(0, 9)} for _ in range(lines)]
    return "".join(json.dumps(r) + "\n" for r in rows).encode()


PARTS = {"set/a.jsonl": _jsonl(1, 900), "set/b.jsonl": _jsonl(2, 1300), "set/notes.txt": b"not data\n"}


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Iterator[S3Server]:
    with s3_server(tmp_path_factory.mktemp("moto"), buckets=(BUCKET,)) as server:
        s3: Any = server.client()
        for key, body in PARTS.items():
            s3.put_object(Bucket=BUCKET, Key=key, Body=body)
        yield server


@pytest.fixture
def aws(store: S3Server, monkeypatch: pytest.MonkeyPatch) -> S3Server:
    for key, value in store.env().items():
        monkeypatch.setenv(key, value)
    monkeypatch.setattr(s3_stream, "CHUNK", 16 << 10)  # several ranged GETs per share, one 16 KiB chunk held
    monkeypatch.setattr(s3_stream, "BACKOFF_S", 0.05)
    return store


def _local(tmp_path: Path) -> list[Path]:
    paths = []
    for key in ("set/a.jsonl", "set/b.jsonl"):
        path = tmp_path / key.split("/")[1]
        path.write_bytes(PARTS[key])
        paths.append(path)
    return paths


@pytest.mark.parametrize("world", [2, 3])
def test_each_rank_streams_its_own_lines_and_about_a_1_over_n_share_of_the_bytes(
    aws: S3Server, tmp_path: Path, world: int
) -> None:
    size = len(PARTS["set/a.jsonl"]) + len(PARTS["set/b.jsonl"])
    local = _local(tmp_path)
    for rank in range(world):
        aws.reset_log()
        remote = ShardedJsonlReader(s3_stream.sources(f"s3://{BUCKET}/set/", "train_data", rank), rank, world)
        streamed = [(raw, off) for raw, off, _ in remote.lines_from()]
        on_disk = [(raw, off) for raw, off, _ in ShardedJsonlReader(local, rank, world).lines_from()]
        assert streamed == on_disk and streamed
        served = aws.bytes_served(f"/{BUCKET}/set/", f"trainctl-rank/{rank}")
        assert size / world * 0.9 <= served <= 1.1 * size / world, (rank, served, size / world)
        assert aws.bytes_served("notes.txt") == 0  # a prefix streams its *.jsonl only


def test_the_next_chunk_is_read_ahead_in_a_thread_and_never_past_the_span(
    aws: S3Server, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each chunk of the span is fetched by the read-ahead thread while the one before it is parsed (only the
    first, asked for before anything was read, is fetched by the reader's own thread); past the span's end, the
    tail of the last line is fetched by the reader itself, never ahead."""
    import threading

    fetched: list[tuple[int, int, str]] = []
    get = s3_stream.S3Source.get

    def recording(self: s3_stream.S3Source, start: int, stop: int) -> bytes:
        fetched.append((start, stop, threading.current_thread().name))
        return get(self, start, stop)

    monkeypatch.setattr(s3_stream.S3Source, "get", recording)
    (source,) = s3_stream.sources(f"s3://{BUCKET}/set/b.jsonl", "train_data", 0)
    body, span_end = PARTS["set/b.jsonl"], 100_000
    with source.open_at(0, span_end) as fh:
        lines = []
        while fh.tell() < span_end and (raw := fh.readline()):
            lines.append(raw)
    assert b"".join(lines) == body[: len(b"".join(lines))] and len(b"".join(lines)) >= span_end
    chunk = s3_stream.CHUNK
    in_span = [(a, b) for a, b, _ in fetched if a < span_end]
    assert in_span == [(a, min(span_end, a + chunk)) for a in range(0, span_end, chunk)]
    assert fetched[0][2] == threading.current_thread().name
    assert all(name.startswith("s3-read-ahead") for a, _, name in fetched[1:] if a < span_end)
    assert all(name == threading.current_thread().name for a, _, name in fetched if a >= span_end)
    assert sum(b - a for a, b, _ in fetched) < span_end + 2 * s3_stream.TAIL + 2000


def test_a_restored_shuffle_buffer_rereads_single_lines_by_small_ranged_gets(aws: S3Server) -> None:
    reader = ShardedJsonlReader(s3_stream.sources(f"s3://{BUCKET}/set/b.jsonl", "train_data", 0), 0, 1)
    lines = list(reader.lines_from())
    raw, offset, _ = lines[700]
    aws.reset_log()
    assert reader.line_at(offset) == raw
    assert 0 < aws.bytes_served("/set/b.jsonl") <= s3_stream.TAIL * 3


def test_a_connection_cut_mid_body_is_read_again_from_where_it_stopped(
    aws: S3Server, monkeypatch: pytest.MonkeyPatch
) -> None:
    port = int(aws.endpoint.rsplit(":", 1)[1])
    proxy = DropProxy(("127.0.0.1", port), f"/{BUCKET}/set/a.jsonl", after_bytes=5000, drops=2).start()
    monkeypatch.setenv("AWS_ENDPOINT_URL", proxy.endpoint)
    try:
        reader = ShardedJsonlReader(s3_stream.sources(f"s3://{BUCKET}/set/a.jsonl", "train_data", 0), 0, 1)
        got = b"".join(raw for raw, _, _ in reader.lines_from())
    finally:
        proxy.stop()
    assert proxy.cut == 2 and got == PARTS["set/a.jsonl"]


def test_a_cut_on_every_try_fails_naming_the_uri(aws: S3Server, monkeypatch: pytest.MonkeyPatch) -> None:
    port = int(aws.endpoint.rsplit(":", 1)[1])
    proxy = DropProxy(("127.0.0.1", port), f"/{BUCKET}/set/a.jsonl", after_bytes=5000, drops=-1).start()
    monkeypatch.setenv("AWS_ENDPOINT_URL", proxy.endpoint)
    try:
        reader = ShardedJsonlReader(s3_stream.sources(f"s3://{BUCKET}/set/a.jsonl", "train_data", 0), 0, 1)
        with pytest.raises(s3_stream.TransferFailed, match=f"s3://{BUCKET}/set/a.jsonl: .*gave up after 5 tries"):
            list(reader.lines_from())
    finally:
        proxy.stop()
    assert proxy.cut >= 5


@pytest.mark.parametrize(
    ("change", "said"), [("replace", r"was replaced \(PreconditionFailed"), ("delete", r"was deleted \(NoSuchKey\)")]
)
def test_an_object_replaced_or_deleted_mid_stream_fails_the_attempt_untried_again_naming_the_uri(
    aws: S3Server, change: str, said: str
) -> None:
    """Listed, then changed under the reader: the pinned GET gets 412 or 404. That is a failed attempt
    (TransferFailed, exit 1), not bad input (exit 2), and one GET: another try cannot bring the listed version back."""
    key = f"gone/{change}.jsonl"
    s3: Any = aws.client()
    s3.put_object(Bucket=BUCKET, Key=key, Body=PARTS["set/a.jsonl"])
    reader = ShardedJsonlReader(s3_stream.sources(f"s3://{BUCKET}/{key}", "train_data", 0), 0, 1)
    if change == "replace":
        s3.put_object(Bucket=BUCKET, Key=key, Body=PARTS["set/b.jsonl"])
    else:
        s3.delete_object(Bucket=BUCKET, Key=key)
    aws.reset_log()
    with pytest.raises(s3_stream.TransferFailed, match=f"streaming s3://{BUCKET}/{key}: the object {said}"):
        list(reader.lines_from())
    assert aws.gets(key) == 1


@pytest.mark.parametrize(
    ("uri", "said"),
    [(f"s3://{BUCKET}/set/missing.jsonl", "no such object"), ("s3://no-such-bucket-s/x.jsonl", "no such bucket")],
)
def test_bad_input_names_the_uri(aws: S3Server, uri: str, said: str) -> None:
    with pytest.raises(TrainerInputError, match=said) as caught:
        s3_stream.sources(uri, "train_data", 0)
    assert uri in str(caught.value)


def test_the_launcher_names_the_endpoint_and_checks_each_streamed_input(aws: S3Server) -> None:
    env = {"TRAINER_STREAM_DATA": "train", "TRAINER_DATA_TRAIN": f"s3://{BUCKET}/set/", "TRAINER_DATA_VAL": "v.jsonl"}
    said: list[str] = []
    s3_stream.announce(env, said.append)
    assert env["TRAINER_S3_ENDPOINT"] == aws.endpoint
    assert said == [f"data s3://{BUCKET}/set/ is streamed by each rank (3 object(s), {sum(map(len, PARTS.values()))} "
                    "bytes; no copy)"]  # fmt: skip
    env["TRAINER_DATA_TRAIN"] = f"s3://{BUCKET}/nothing-here/"
    with pytest.raises(TrainerInputError, match="nothing-here"):
        s3_stream.announce(env, said.append)

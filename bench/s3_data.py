"""Benchmark: `s3://` data (issue 35), against moto's server over HTTP on this machine.

- Staging: MB/s of the launcher's cache (`data_cache.stage` into an empty cache: transfer manager, verification,
  manifest, atomic publish) against boto3's own `download_file` of the same object, interleaved; target >= 0.9x.
- Streaming: records/s of the trainer's rank-sharded reader (rank 0 of 1, batches of 32 tensors) reading the
  digits JSONL straight from S3 (`mode: stream`, s3_stream.py) against the same reader on a local copy.
- Bytes per rank: one pass of each of N ranks over the object, what the store served each (its request log: each
  GET's Range, the rank in the User-Agent), over size/N; target <= 1.1.

moto serves from one Python process, so its rates are a floor for a real store; the ratios are what is judged.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from .common import WORK, Figure, figure, interleaved
from .datasets import digits

NAME = "s3data"
BUCKET = "bench-data"
BATCH = 32
KEYS = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing-secret", "AWS_DEFAULT_REGION": "us-east-1",
        "AWS_CONFIG_FILE": os.devnull, "AWS_SHARED_CREDENTIALS_FILE": os.devnull, "AWS_EC2_METADATA_DISABLED": "true"}  # fmt: skip


@contextmanager
def moto_server(log: Path) -> Iterator[str]:
    """`python -m moto.server` on a free loopback port with its request recorder on; its endpoint."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {**os.environ, "MOTO_ENABLE_RECORDING": "True", "MOTO_RECORDER_FILEPATH": str(log)}
    proc = subprocess.Popen([sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)], env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError("moto.server did not start") from None
                time.sleep(0.2)
        yield f"http://127.0.0.1:{port}"
    finally:
        proc.terminate()
        proc.wait(timeout=30)


@contextmanager
def aws_env(endpoint: str) -> Iterator[None]:
    """This process reaches the store as a run does: boto3's chain, from the environment."""
    saved = {k: os.environ.get(k) for k in [*KEYS, "AWS_ENDPOINT_URL"]}
    os.environ.update({**KEYS, "AWS_ENDPOINT_URL": endpoint})
    try:
        yield
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def served(log: Path, key: str, agent: str) -> int:
    """Body bytes the store sent for GETs of `key` whose User-Agent holds `agent` (each GET's Range)."""
    total = 0
    for line in log.read_text().splitlines():
        entry = json.loads(line)
        headers = {k.lower(): v for k, v in entry.get("headers", {}).items()}
        if entry["method"] != "GET" or not urlsplit(entry["url"]).path.endswith(key):
            continue
        if agent in headers.get("user-agent", ""):
            first, _, last = headers["range"].removeprefix("bytes=").partition("-")
            total += int(last) - int(first) + 1
    return total


def stage_rate(s3: Any, uri: str, size: int, tmp: Path, cpu: list[float]) -> float:
    """MB/s of the launcher's staging into an empty cache; this process's CPU seconds appended to `cpu`."""
    from trainer.launcher import data_cache

    cache = tmp / "cache"
    shutil.rmtree(cache, ignore_errors=True)
    t0, c0 = time.perf_counter(), time.process_time()
    data_cache.stage(uri, cache, lambda _m: None, s3=s3)
    cpu.append(time.process_time() - c0)
    return size / 1e6 / (time.perf_counter() - t0)


def download_rate(s3: Any, key: str, size: int, tmp: Path, cpu: list[float]) -> float:
    """MB/s of boto3's own `download_file` of the same object; this process's CPU seconds appended to `cpu`."""
    dest = tmp / "plain.bin"
    dest.unlink(missing_ok=True)
    t0, c0 = time.perf_counter(), time.process_time()
    s3.download_file(BUCKET, key, str(dest))
    cpu.append(time.process_time() - c0)
    return size / 1e6 / (time.perf_counter() - t0)


def stream_rate(files: list[Any]) -> float:
    """Records/s of the rank-sharded reader (rank 0 of 1) over `files`, local paths or S3 objects."""
    from trainer.data.streaming import ShardedJsonlReader

    t0 = time.perf_counter()
    n = 0
    for x, _y, _ids in ShardedJsonlReader(files, 0, 1).batches(BATCH, "classification"):
        n += len(x)
    return n / (time.perf_counter() - t0)


def rank_share(uri: str, key: str, size: int, world: int, log: Path) -> list[float]:
    """Per rank, the bytes the store served one pass of its reader, over size/N."""
    from trainer import s3_stream
    from trainer.data.streaming import ShardedJsonlReader

    out = []
    for rank in range(world):
        log.write_text("")
        for _ in ShardedJsonlReader(s3_stream.sources(uri, "train_data", rank), rank, world).lines_from():
            pass
        out.append(served(log, key, f"trainctl-rank/{rank}") / (size / world))
    return out


def staging(s3: Any, mib: int, reps: int, tmp: Path) -> list[Figure]:
    """The cache's staging of one `mib` MiB object against boto3's `download_file` of it, interleaved."""
    blob = os.urandom(mib << 20)
    key = f"blob-{mib}.bin"
    s3.put_object(Bucket=BUCKET, Key=key, Body=blob)  # boto3 adds its CRC32: the cache verifies it
    size, uri = len(blob), f"s3://{BUCKET}/{key}"
    del blob
    cpu: dict[str, list[float]] = {"stage": [], "plain": []}
    rates = interleaved({"stage": lambda: stage_rate(s3, uri, size, tmp, cpu["stage"]),
                         "plain": lambda: download_rate(s3, key, size, tmp, cpu["plain"])}, reps)  # fmt: skip
    ratio = [a / b for a, b in zip(rates["stage"], rates["plain"], strict=True)]
    cpu_ratio = [a / b for a, b in zip(cpu["stage"][1:], cpu["plain"][1:], strict=True)]  # past the warm-up
    return [
        figure(NAME, f"staging into the cache / boto3 download_file, {mib} MiB", ratio, unit="x", target=">= 0.9",
               note="one object from moto's server over HTTP; the cache verifies its CRC32 and records a CRC32 per 8 MiB part"),
        figure(NAME, f"staging into the cache, {mib} MiB", rates["stage"], unit="MB/s"),
        figure(NAME, f"boto3 download_file, {mib} MiB", rates["plain"], unit="MB/s"),
        figure(NAME, f"client CPU, staging / boto3 download_file, {mib} MiB", cpu_ratio, unit="x",
               note="this process's CPU seconds (transfer threads, digests, manifest), not the server's"),
    ]  # fmt: skip


def run(quick: bool = False) -> list[Figure]:
    import boto3
    from trainer import s3_stream

    sizes, copies, reps = ((4,), 2, 1) if quick else ((32, 128), 10, 5)
    stage_reps = 1 if quick else 9  # a 32 MiB staging takes ~0.15 s: more pairs, as one busy moment moves a pair
    tmp = WORK / "s3data"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    log = tmp / "requests.jsonl"
    local = digits(copies)
    figs: list[Figure] = []
    with moto_server(log) as endpoint, aws_env(endpoint):
        s3: Any = boto3.session.Session().client("s3")
        s3.create_bucket(Bucket=BUCKET)
        for mib in sizes:
            figs += staging(s3, mib, stage_reps, tmp)
        s3.upload_file(str(local), BUCKET, "digits/train.jsonl")
        data_uri = f"s3://{BUCKET}/digits/train.jsonl"
        rates = interleaved({"s3": lambda: stream_rate(s3_stream.sources(data_uri, "train_data", 0)),
                             "local": lambda: stream_rate([local])}, reps)  # fmt: skip
        shares = {world: rank_share(data_uri, "digits/train.jsonl", local.stat().st_size, world, log)
                  for world in (2, 4)}  # fmt: skip
    shutil.rmtree(tmp, ignore_errors=True)
    stream_ratio = [a / b for a, b in zip(rates["s3"], rates["local"], strict=True)]
    mb = local.stat().st_size / 1e6
    figs += [
        figure(NAME, "streaming reader from S3", [r / 1e3 for r in rates["s3"]], unit="k records/s",
               note=f"digits x{copies}, {mb:.1f} MB, ranged GETs of {s3_stream.CHUNK >> 20} MiB, batches of {BATCH}"),
        figure(NAME, "streaming reader from a local file", [r / 1e3 for r in rates["local"]], unit="k records/s"),
        figure(NAME, "streaming from S3 / from a local file", stream_ratio, unit="x"),
    ]  # fmt: skip
    for world, per_rank in shares.items():
        worst = max(per_rank)
        figs.append(Figure(NAME, f"S3 bytes served per rank / (size/N), {world} ranks", worst, worst, worst, unit="x",
                           target="<= 1.1", reps=1, note="max over ranks, one pass; the store's log (Range per GET)",
                           detail={"per_rank": [round(r, 4) for r in per_rank]}))  # fmt: skip
    return figs

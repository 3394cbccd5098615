"""The object store for data tests: moto's own server as a process on 127.0.0.1 (`python -m moto.server`),
with moto's request recorder on (MOTO_ENABLE_RECORDING, moto/moto_api/_internal/recorder/models.py: one JSON
line per request, method and raw URL), so a test counts the GETs the store served. And `DropProxy`, a TCP proxy
in front of it that cuts a download's connection after some bytes of the response."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import boto3
import yaml

REPO = Path(__file__).resolve().parents[2]
KEYS = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing-secret", "AWS_DEFAULT_REGION": "us-east-1"}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class S3Server:
    endpoint: str
    log: Path

    def env(self, endpoint: str | None = None) -> dict[str, str]:
        """What a process needs to reach this store: the endpoint and keys, no config files of this machine."""
        return {**KEYS, "AWS_ENDPOINT_URL": endpoint or self.endpoint, "AWS_CONFIG_FILE": os.devnull,
                "AWS_SHARED_CREDENTIALS_FILE": os.devnull, "AWS_EC2_METADATA_DISABLED": "true"}  # fmt: skip

    def client(self) -> object:
        return boto3.session.Session(
            aws_access_key_id=KEYS["AWS_ACCESS_KEY_ID"], aws_secret_access_key=KEYS["AWS_SECRET_ACCESS_KEY"],
            region_name=KEYS["AWS_DEFAULT_REGION"],
        ).client("s3", endpoint_url=self.endpoint)  # fmt: skip

    def put_digits(self, digits_data: Path, bucket: str) -> None:
        """The digits example's train.jsonl and val.jsonl at s3://BUCKET/digits/ (the bucket made if missing)."""
        s3: Any = self.client()
        if bucket not in [b["Name"] for b in s3.list_buckets()["Buckets"]]:
            s3.create_bucket(Bucket=bucket)
        for name in ("train", "val"):
            s3.upload_file(str(digits_data / f"{name}.jsonl"), bucket, f"digits/{name}.jsonl")

    def digits_job(self, path: Path, digits_data: Path, bucket: str, data: dict[str, Any], **trainer: Any) -> Path:
        """examples/digits.yaml, unchanged but for `data` (its files put in `bucket` first) and `trainer`'s
        settings, written to `path`."""
        self.put_digits(digits_data, bucket)
        job = yaml.safe_load((REPO / "examples" / "digits.yaml").read_text())
        job["data"] = data
        job["trainer"].update(trainer)
        path.write_text(yaml.safe_dump(job))
        return path

    def stream_digits_job(
        self, path: Path, digits_data: Path, bucket: str, setenv: Callable[[str, str], None], **fields: Any
    ) -> Path:
        """`digits_job` with data.train streamed (`mode: stream`, `trainer.streaming: true`, 1 epoch) and data.val
        staged, this store's endpoint and keys set through `setenv` (monkeypatch's); `fields` replace the example's
        top-level ones (resources, slurm)."""
        for key, value in self.env().items():
            setenv(key, value)
        data = {"train": {"uri": f"s3://{bucket}/digits/train.jsonl", "mode": "stream"},
                "val": f"s3://{bucket}/digits/val.jsonl"}  # fmt: skip
        self.digits_job(path, digits_data, bucket, data, epochs=1, streaming=True)
        path.write_text(yaml.safe_dump({**yaml.safe_load(path.read_text()), **fields}))
        return path

    def requests(self) -> list[tuple[str, str]]:
        """(method, path) of every request the server recorded, in order."""
        if not self.log.exists():
            return []
        found = []
        for line in self.log.read_text().splitlines():
            entry = json.loads(line)
            found.append((entry["method"], urlsplit(entry["url"]).path))
        return found

    def gets(self, path_part: str) -> int:
        """GETs whose path holds `path_part` (an object's bucket/key): the downloads of it."""
        return sum(1 for method, path in self.requests() if method == "GET" and path_part in path)

    def assert_each_rank_read_its_share(self, path_part: str, size: int, ranks: int, passes: int) -> None:
        """Each rank's streaming reader (User-Agent `trainctl-rank/R`) was served 0.9-1.1x of size/N per pass, and
        every GET of the object came from a rank's reader (none from a launcher: nothing of it was staged)."""
        for rank in range(ranks):
            served = self.bytes_served(path_part, f"trainctl-rank/{rank}")
            assert 0.9 * size / ranks * passes <= served <= 1.1 * size / ranks * passes, (rank, served, size)
        readers = sum(self.bytes_served(path_part, f"trainctl-rank/{r}") for r in range(ranks))
        assert self.bytes_served(path_part) == readers, (self.bytes_served(path_part), readers)

    def bytes_served(self, path_part: str, agent_part: str = "") -> int:
        """Body bytes of the GETs of `path_part` whose User-Agent holds `agent_part`, from each request's `Range`
        (a GET without one counts the object's whole size): what the store sent those readers."""
        total = 0
        for line in self.log.read_text().splitlines() if self.log.exists() else []:
            entry = json.loads(line)
            headers = {k.lower(): v for k, v in entry.get("headers", {}).items()}
            if entry["method"] != "GET" or path_part not in urlsplit(entry["url"]).path:
                continue
            if agent_part not in headers.get("user-agent", ""):
                continue
            if "range" not in headers:
                bucket, _, key = urlsplit(entry["url"]).path.lstrip("/").partition("/")
                total += int(self.client().head_object(Bucket=bucket, Key=key)["ContentLength"])  # type: ignore[attr-defined]
                continue
            first, _, last = headers["range"].removeprefix("bytes=").partition("-")
            total += int(last) - int(first) + 1
        return total

    def reset_log(self) -> None:
        self.log.write_text("")


@contextmanager
def s3_server(tmp: Path, auth_after: int | None = None, buckets: tuple[str, ...] = ()) -> Iterator[S3Server]:
    """`auth_after`: moto checks each request's keys and IAM policies after that many requests
    (INITIAL_NO_AUTH_ACTION_COUNT, moto/core/authorization.py), as AWS does; None: never. `buckets`: made first."""
    port = free_port()
    log = tmp / "moto-requests.jsonl"
    env = {**os.environ, "MOTO_ENABLE_RECORDING": "True", "MOTO_RECORDER_FILEPATH": str(log)}
    if auth_after is not None:
        env["INITIAL_NO_AUTH_ACTION_COUNT"] = str(auth_after)
    proc = subprocess.Popen(
        [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
        env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 60
        while True:
            assert proc.poll() is None, "moto.server exited"
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                assert time.monotonic() < deadline, "moto.server did not listen in 60 s"
                time.sleep(0.2)
        server = S3Server(f"http://127.0.0.1:{port}", log)
        s3: Any = server.client()
        for bucket in buckets:
            s3.create_bucket(Bucket=bucket)
        yield server
    finally:
        proc.terminate()
        proc.wait(timeout=30)


@dataclass
class DropProxy:
    """127.0.0.1:port -> the store. A connection whose request is a GET naming `path_part` is cut after
    `after_bytes` of the response, for the first `drops` such connections (-1: all of them). With `method` PUT
    (an upload), it is the request that is cut, after `after_bytes` of it reached the store. `before(n)`, if given,
    runs before the n-th such request is passed on (with `drops=0`, a hook that changes the store mid-run)."""

    upstream: tuple[str, int]
    path_part: str
    after_bytes: int
    drops: int = 1
    method: str = "GET"
    port: int = 0
    cut: int = 0
    seen: int = 0
    before: Callable[[int], None] | None = None
    _server: socket.socket | None = None
    _lock: threading.Lock = field(default_factory=threading.Lock)

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> DropProxy:
        self._server = socket.socket()
        self._server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._server.bind(("127.0.0.1", 0))
        self._server.listen(64)
        self.port = self._server.getsockname()[1]
        threading.Thread(target=self._accept, daemon=True).start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.close()

    def _accept(self) -> None:
        assert self._server is not None
        while True:
            try:
                client, _ = self._server.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(client,), daemon=True).start()

    def _serve(self, client: socket.socket) -> None:
        upstream = socket.create_connection(self.upstream)
        state = {"cutting": False}

        def up() -> None:
            sent_up = 0
            try:
                while data := client.recv(65536):
                    first = data.split(b"\r\n", 1)[0]
                    if first.startswith(f"{self.method} ".encode()) and self.path_part.encode() in first:
                        with self._lock:
                            self.seen += 1
                            if self.before is not None:
                                self.before(self.seen)
                            if self.drops < 0 or self.cut < self.drops:
                                self.cut += 1
                                state["cutting"] = True
                    if state["cutting"] and self.method != "GET":
                        if sent_up + len(data) >= self.after_bytes:
                            upstream.sendall(data[: max(0, self.after_bytes - sent_up)])
                            for sock in (client, upstream):
                                with suppress(OSError):
                                    sock.shutdown(socket.SHUT_RDWR)
                            return
                        sent_up += len(data)
                    upstream.sendall(data)
            except OSError:
                pass
            finally:
                upstream.close()

        threading.Thread(target=up, daemon=True).start()
        sent = 0
        try:
            while data := upstream.recv(65536):
                if state["cutting"] and self.method == "GET":
                    if sent + len(data) >= self.after_bytes:
                        client.sendall(data[: max(0, self.after_bytes - sent)])
                        break
                    sent += len(data)
                client.sendall(data)
        except OSError:
            pass
        finally:
            for sock in (client, upstream):
                with suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)
                sock.close()


@contextmanager
def deleting(server: S3Server, bucket: str, key: str, before_get: int) -> Iterator[DropProxy]:
    """A proxy in front of `server` that deletes s3://BUCKET/KEY just before it passes on the `before_get`-th GET of
    it, and cuts nothing: an object gone mid-run. Point AWS_ENDPOINT_URL at its `endpoint`."""
    s3: Any = server.client()

    def delete(seen: int) -> None:
        if seen == before_get:
            s3.delete_object(Bucket=bucket, Key=key)

    port = int(server.endpoint.rsplit(":", 1)[1])
    proxy = DropProxy(("127.0.0.1", port), f"/{bucket}/{key}", after_bytes=0, drops=0, before=delete).start()
    try:
        yield proxy
    finally:
        proxy.stop()

"""Checkpoints mirrored to `checkpoint.dir: s3://...` (issue 35 §4): the trainer checkpoints into its local folder
as ever (atomic publish, CRC checks), and rank 0 uploads each published `step-*` folder to `<prefix>/step-*/` in
the background, so the step loop never waits on S3. Each upload is the output upload's (output_upload.upload:
boto3's transfer manager, every file verified, `_complete` written last), so a step prefix with `_complete` is a
whole checkpoint. A failed upload is a warning: the local checkpoint stands, and the next one is uploaded.

At resume, before the local choice (checkpoint.files.select), rank 0 fetches the newest step in S3 that has a
`_complete` and is newer than any local one into the local folder (a temporary folder, each file's size and sha256
checked against `_complete`, then one rename), so a run on another machine, or another target, continues where
the prefix is. The checkpoint's own checks (meta.json, CRCs, settings) then apply as to a local one. The prefix is
the user's and shared on purpose, like a `checkpoint.dir` they name: a fetched checkpoint carries `FETCHED`, which
identity.check_owner accepts, naming where it came from.
"""

from __future__ import annotations

import json
import os
import queue
import random
import re
import shutil
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from .. import output_upload, s3_digests, s3_objects

ENV = "TRAINER_CHECKPOINT_S3"
FETCHED = "fetched-from"
"""A file in a checkpoint fetched from S3, naming its URI (identity.check_owner accepts it)."""
_STEP = re.compile(r"^(step-\d{8})/_complete$")


def prefix_from_env() -> str | None:
    uri = os.environ.get(ENV) or None
    return uri.rstrip("/") + "/" if uri else None


class Mirror:
    """Rank 0's background uploads of published checkpoints, one at a time, in the order they were published;
    after each, this run's uploads beyond the newest `keep` (0: none removed) are deleted from the prefix."""

    def __init__(self, prefix: str, say: Callable[[str], None], keep: int = 0) -> None:
        self.prefix, self.say, self.keep = prefix, say, keep
        self._owners: dict[str, str | None] = {}  # step name -> the run uid its `_complete` names (immutable)
        self._queue: queue.Queue[Path | None] = queue.Queue()
        self._thread = threading.Thread(target=self._run, name="checkpoint-s3", daemon=True)
        self._thread.start()

    def publish(self, path: Path) -> None:
        """Upload the published checkpoint `path` after the ones before it (returns at once)."""
        self._queue.put(path)

    def drain(self) -> None:
        """Block until every checkpoint published so far is uploaded (or its upload failed)."""
        self._queue.join()

    def _run(self) -> None:
        while True:
            path = self._queue.get()
            try:
                if path is not None:
                    dest = f"{self.prefix}{path.name}/"
                    done = output_upload.upload(path, dest, self.say)
                    self.say(f"checkpoint {path} -> {dest} ({done.files} file(s), {done.size} bytes, verified)")
                    if self.keep > 0:
                        self._prune()
            except Exception as exc:  # the local checkpoint stands; the run goes on
                self.say(f"WARNING: checkpoint {path} was not uploaded, or older ones not pruned: {exc}")
            finally:
                self._queue.task_done()

    def _prune(self) -> None:
        """Delete this run's steps in the prefix beyond its newest `keep`, as `keep_checkpoints` prunes the local
        folder. Only steps whose `_complete` names this run's uid (its retries' too): the prefix is shared on
        purpose, and another run's checkpoints there are that run's. `_complete` goes first, so a step half
        deleted is never taken for a whole one."""
        uid = os.environ.get(output_upload.UID_ENV)
        if not uid:
            return
        parsed = s3_objects.parse(self.prefix)
        s3 = s3_objects.client()
        steps = _steps(s3, parsed.bucket, parsed.key)
        for name in steps:
            if name not in self._owners:
                self._owners[name] = _owner(s3, parsed.bucket, f"{parsed.key}{name}/{output_upload.COMPLETE}")
        own = [n for n in steps if self._owners.get(n) == uid]
        for name in own[self.keep :]:
            step = f"{parsed.key}{name}/"
            s3.delete_object(Bucket=parsed.bucket, Key=step + output_upload.COMPLETE)
            pages = s3.get_paginator("list_objects_v2").paginate(Bucket=parsed.bucket, Prefix=step)
            for page in pages:
                if keys := [{"Key": item["Key"]} for item in page.get("Contents", [])]:
                    s3.delete_objects(Bucket=parsed.bucket, Delete={"Objects": keys, "Quiet": True})
            self._owners.pop(name, None)
            self.say(f"checkpoint {self.prefix}{name}/ removed from S3 (keep_checkpoints {self.keep})")


def _steps(s3: Any, bucket: str, key: str) -> list[str]:
    """The step names under the prefix with a `_complete`, newest first."""
    found = set()
    for page in s3.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=key):
        for item in page.get("Contents", []):
            if m := _STEP.match(item["Key"][len(key) :]):
                found.add(m.group(1))
    return sorted(found, reverse=True)


def _owner(s3: Any, bucket: str, key: str) -> str | None:
    """The run uid a step's `_complete` names; None when it is gone since the listing (its run pruned it)."""
    from botocore.exceptions import ClientError

    try:
        found = json.loads(s3.get_object(Bucket=bucket, Key=key)["Body"].read()).get("run_uid")
    except ClientError:
        return None
    return str(found) if found else None


def _fetch_step(s3: Any, bucket: str, key: str, name: str, root: Path) -> Path:
    """One step folder into `root`, checked against its `_complete`, published by one rename."""
    uri = f"s3://{bucket}/{key}{name}/"
    manifest = json.loads(s3.get_object(Bucket=bucket, Key=f"{key}{name}/{output_upload.COMPLETE}")["Body"].read())
    tmp = root / f".tmp-s3-{name}-{os.getpid()}-{random.getrandbits(32):08x}"
    try:
        for rel, want in manifest["files"].items():
            dest = tmp / rel
            dest.parent.mkdir(parents=True, exist_ok=True)
            obj = s3_objects.S3Object(key=f"{key}{name}/{rel}", size=int(want["size"]), etag="")
            s3_objects.download(s3, bucket, obj, dest)
            digest = s3_digests.file_digests(dest, {"sha256"})["sha256"]
            if dest.stat().st_size != want["size"] or digest != want["sha256"]:
                raise s3_objects.TransientError(f"{uri}{rel}: does not match its {output_upload.COMPLETE}")
        (tmp / FETCHED).write_text(uri + "\n")
        final = root / name
        os.rename(tmp, final)
        return final
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def fetch_newer(prefix: str, root: Path, newest_local: int, say: Callable[[str], None]) -> Path | None:
    """The newest step in S3 newer than `newest_local` (-1: none here), fetched into `root`; None when there is
    none, or none that fetches whole (each failure is said, and the next older is tried)."""
    parsed = s3_objects.parse(prefix)
    s3 = s3_objects.client()
    try:
        steps = _steps(s3, parsed.bucket, parsed.key)
    except s3_objects.retried_errors() as exc:
        say(f"WARNING: cannot list the checkpoints under {prefix}: {s3_objects.explain(prefix, exc)}")
        return None
    root.mkdir(parents=True, exist_ok=True)
    for name in steps:
        if int(name.removeprefix("step-")) <= newest_local:
            return None
        if (root / name).exists():
            continue
        try:
            path = _fetch_step(s3, parsed.bucket, parsed.key, name, root)
        except (s3_objects.TransientError, ValueError, KeyError, *s3_objects.retried_errors()) as exc:  # type: ignore[misc]
            say(f"WARNING: checkpoint {prefix}{name}/ could not be fetched whole ({exc}); trying an older one")
            continue
        say(f"checkpoint {prefix}{name}/ fetched into {path} (newer than any here)")
        return path
    return None

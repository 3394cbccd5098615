"""A function job's results, as every rank wrote them (trainer/function.py): values back, errors raised again.

Each rank writes `rank-<N>.json` (ok, the sha256 of its pickle, the remote type, message and traceback) and
`rank-<N>.pkl` into the run's output location; a target hands the folder's files over as bytes
(`Target.function_results`). A pickle is loaded only after its sha256 matches the digest its rank wrote.
Unpickling runs code: load results only from run folders you trust (docs/sdk.md, "Your function").
"""

from __future__ import annotations

import hashlib
import io
import json
import pickle
import re
import tarfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import TrainctlError
from ..function import RESULTS

_NAME = re.compile(r"rank-(\d+)\.json")


class RemoteError(TrainctlError):
    """The function raised on a rank, and its exception could not be rebuilt here: its type, message and
    traceback, as text."""

    def __init__(self, rank: int, remote_type: str, message: str, traceback: str) -> None:
        self.rank, self.remote_type, self.message, self.remote_traceback = rank, remote_type, message, traceback
        super().__init__(f"rank {rank} raised {remote_type}: {message}\n\nremote traceback:\n{traceback}")


class RemoteTraceback(Exception):
    """Set as a re-raised exception's `__cause__`, so the printed chain shows where it was raised remotely."""

    def __init__(self, text: str) -> None:
        super().__init__(text)
        self.text = text

    def __str__(self) -> str:
        return f"\n\nremote traceback (the function's own frames):\n{self.text}"


@dataclass(frozen=True)
class Outcome:
    """One rank's end: its value, or the exception it raised (`error`, ready to raise)."""

    rank: int
    ok: bool
    value: Any = None
    error: BaseException | None = None


def outcomes(files: Mapping[str, bytes]) -> dict[int, Outcome]:
    """Every rank's outcome from the results folder's files, by rank."""
    found: dict[int, Outcome] = {}
    for name, data in files.items():
        match = _NAME.fullmatch(name)
        if match is None:
            continue
        entry = json.loads(data)
        rank = int(match.group(1))
        pickled = files.get(f"rank-{rank}.pkl")
        loaded = _load(rank, entry, pickled)
        if entry.get("ok"):
            found[rank] = Outcome(rank, True, value=loaded)
        else:
            found[rank] = Outcome(rank, False, error=_error(rank, entry, loaded))
    return found


def _load(rank: int, entry: dict[str, Any], pickled: bytes | None) -> Any:
    if pickled is None or not entry.get("sha256"):
        return None
    found = hashlib.sha256(pickled).hexdigest()
    if found != entry["sha256"]:
        raise TrainctlError(
            f"rank {rank}'s result has sha256 {found}, but the rank wrote {entry['sha256']}: it was changed or "
            "cut short after the rank wrote it; it is not loaded"
        )
    try:
        return pickle.loads(pickled)
    except Exception as exc:  # a class this side cannot import: the error falls back to RemoteError
        if entry.get("ok"):
            raise TrainctlError(
                f"rank {rank}'s return value cannot be unpickled here ({type(exc).__name__}: {exc}); import or "
                "install what it refers to on this side"
            ) from None
        return None


def _error(rank: int, entry: dict[str, Any], loaded: Any) -> BaseException:
    """The remote exception as its own type where it unpickled, else a RemoteError; the traceback attached."""
    text = str(entry.get("traceback", ""))
    if isinstance(loaded, BaseException):
        loaded.__cause__ = RemoteTraceback(text)
        loaded.remote_traceback = text  # type: ignore[attr-defined]
        loaded.rank = rank  # type: ignore[attr-defined]
        return loaded
    return RemoteError(rank, str(entry.get("type", "Exception")), str(entry.get("message", "")), text)


def first_error(found: Mapping[int, Outcome]) -> BaseException | None:
    """The exception of the lowest rank that raised (None: none did)."""
    for rank in sorted(found):
        if found[rank].error is not None:
            return found[rank].error
    return None


def folder_files(output_dir: str | Path | None) -> dict[str, bytes] | None:
    """The results folder's files in an output folder here (a local run, SageMaker local mode's hosts)."""
    folder = Path(output_dir or "/nonexistent") / RESULTS
    if not folder.is_dir():
        return None
    return {p.name: p.read_bytes() for p in folder.iterdir() if p.is_file() and not p.name.startswith(".")}


def tar_files(data: bytes, under: str = "") -> dict[str, bytes]:
    """The results folder as `tar -C <folder> -cf - .` sent it (a target that reads it through a shell), or, with
    `under` ("function/"), inside an archive of the whole output folder (SageMaker's model.tar.gz)."""
    found: dict[str, bytes] = {}
    with tarfile.open(fileobj=io.BytesIO(data), mode="r:*") as tar:
        for member in tar.getmembers():
            name = member.name.removeprefix("./")
            if not name.startswith(under):
                continue
            name = name[len(under) :]
            extracted = tar.extractfile(member) if member.isfile() and "/" not in name else None
            if extracted is not None and not name.startswith("."):
                found[name] = extracted.read()
    return found

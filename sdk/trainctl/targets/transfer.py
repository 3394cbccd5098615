"""What a target's `--resume-from` steps share (docs/resume.md): the refusal, the fetched copy, walking step-*
folders newest first; and a file's sha256, which S3 copies are checked by. At the interface's level, so a target's place/fetch code imports nothing above it;
submit/resume.py (above the targets) orchestrates with these.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

from ..errors import TrainctlError


class ResumeError(TrainctlError):
    """`--resume-from` cannot be honoured: nothing was submitted. Exit code 2."""

    exit_code = 2


STEP_DIR = re.compile(r"^step-(\d{8})$")
"""A checkpoint folder's name: the trainer's `checkpoint.STEP_DIR` (the SDK never imports the trainer)."""

Accept = Callable[[Path], bool]
"""Told a fetched step-* folder, says whether it verifies (False: drop it and fetch the next older one)."""


@dataclass(frozen=True)
class Fetched:
    """What a target's `fetch_checkpoints` copied here: `path` and the remote place it came from."""

    path: Path
    origin: str


def newest_steps(names: Iterable[str]) -> list[str]:
    """The step-* folder names among `names`, newest first (the order a resume tries them)."""
    return sorted({n for n in names if STEP_DIR.match(n)}, reverse=True)


def fetch_newest(steps: list[str], copy: Callable[[str, Path], str], dest: Path, accept: Accept, where: str) -> Fetched:
    """Copy the step folders newest first (`copy(name, folder)` returns its origin) into `dest`, until
    `accept` takes one; a refused one is deleted, so a long history is not fetched whole."""
    if not steps:
        raise ResumeError(
            f"--resume-from: no checkpoint (step-* folder) under {where}; the run wrote none there "
            "(checkpoint.every_steps), or they were deleted"
        )
    import shutil  # here, not at the top: a SageMaker render reads sha256_of only (shutil loads bz2 and lzma)

    for name in steps:
        folder = dest / name
        origin = copy(name, folder)
        if accept(folder):
            return Fetched(folder, origin)
        shutil.rmtree(folder, ignore_errors=True)
    raise ResumeError(f"--resume-from: none of the {len(steps)} checkpoints under {where} verifies (all corrupt)")


def fetch_folder(root: Path, dest: Path, accept: Accept | None) -> Fetched:
    """`fetch_newest` for checkpoints in a folder on this machine that the run store does not name as
    `checkpoint_dir` (a `local=true` SageMaker run's algo-1 /opt/ml/checkpoints)."""
    if not root.is_dir():
        raise ResumeError(f"--resume-from: its checkpoint folder {root} does not exist (deleted?)")
    import shutil

    if accept is None:
        shutil.copytree(root, dest, dirs_exist_ok=True)
        return Fetched(dest, str(root))

    def copy(name: str, folder: Path) -> str:
        shutil.copytree(root / name, folder)
        return str(root / name)

    return fetch_newest(newest_steps(p.name for p in root.iterdir() if p.is_dir()), copy, dest, accept, str(root))


def sha256_of(path: Path) -> str:
    """A file's sha256, read in 1 MiB pieces (hashlib.file_digest needs Python 3.11)."""
    digest = hashlib.sha256()
    with path.open("rb") as f:
        while chunk := f.read(1 << 20):
            digest.update(chunk)
    return digest.hexdigest()

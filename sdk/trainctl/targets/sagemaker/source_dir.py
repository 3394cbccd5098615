"""The user's source_dir as a deterministic `sourcedir.tar.gz` (same files, same bytes), for the `code` channel.

Deterministic so the same code uploads to the same bytes (reproducible runs, cacheable uploads):
sorted paths, zeroed times and owners, normalised modes, gzip without a timestamp.
"""

from __future__ import annotations

import os
from pathlib import Path

from ...errors import JobError

EXCLUDED_DIRS = frozenset({"__pycache__", ".git", ".hg", ".svn", ".mypy_cache", ".pytest_cache", ".ruff_cache"})
EXCLUDED_SUFFIXES = (".pyc", ".pyo")


def resolve_source_dir(source_dir: str, base_dir: Path | None) -> Path:
    """The folder on disk; relative paths are taken from the job file's folder (else the working dir)."""
    path = Path(source_dir).expanduser()
    if not path.is_absolute() and base_dir is not None:
        path = base_dir / path
    if not path.is_dir():
        raise JobError([f"sagemaker.source_dir: {str(path)!r} is not a directory"])
    return path


def _files(root: Path) -> list[Path]:
    found: list[Path] = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if d not in EXCLUDED_DIRS)
        for name in sorted(filenames):
            if not name.endswith(EXCLUDED_SUFFIXES):
                found.append(Path(dirpath) / name)
    return sorted(found, key=lambda p: p.relative_to(root).as_posix())


def pack_source_dir(root: Path, entry_point: str) -> bytes:
    """The tarball's bytes: trainctl.bundle's deterministic pack of `root` (kept for `sagemaker.source_dir`,
    now an alias of the job-level `code:`), every file at the archive's top level as the SageMaker SDK lays it out."""
    from ...bundle import pack
    from ...code import Code

    if not (root / entry_point).is_file():
        raise JobError([f"sagemaker.entry_point: {entry_point!r} is not a file in {str(root)!r}"])
    return pack(root, Code(dir=str(root))).data

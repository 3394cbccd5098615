"""Where data comes from: a file, a directory of `*.jsonl` (or of `*.bin` token shards), or a glob. No
torch import, so a wrong path fails in a fraction of a second."""

from __future__ import annotations

import glob
from pathlib import Path

from ..errors import TrainerInputError


def resolve_files(spec: str, field: str) -> list[Path]:
    """A JSONL file, a directory of `*.jsonl` (else of `*.bin` token shards), or a glob -> the sorted list of files."""
    path = Path(spec)
    if path.is_dir():
        files = sorted(p for p in path.glob("*.jsonl") if p.is_file())
        files = files or sorted(p for p in path.glob("*.bin") if p.is_file())
        if not files:
            raise TrainerInputError(f"{field}: directory {spec} has no *.jsonl files (nor *.bin token shards)")
        return files
    if path.is_file():
        return [path]
    if glob.has_magic(spec):
        files = sorted(Path(p) for p in glob.glob(spec, recursive=True) if Path(p).is_file())
        if not files:
            raise TrainerInputError(f"{field}: pattern {spec!r} matches no files")
        return files
    raise TrainerInputError(f"{field}: no such file or directory: {spec}")

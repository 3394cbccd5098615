"""The benchmark's data, made here from scikit-learn's bundled digits (no download)."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from .common import WORK


def digits(copies: int = 1) -> Path:
    """`train.jsonl` of the digits split (1,438 records), repeated `copies` times; cached under bench/.work."""
    base = WORK / "data" / "digits"
    if not (base / "train.jsonl").is_file():
        from trainer.examples.digits_data import write_digits

        # written aside, then renamed into place: benchmarks running at once (tests/bench) never read half a file
        tmp = base.with_name(f"digits.{os.getpid()}.tmp")
        write_digits(tmp)
        try:
            tmp.rename(base)
        except OSError:  # another process's folder is there (or a partial one from before this rename)
            shutil.rmtree(tmp, ignore_errors=True)
            if not (base / "train.jsonl").is_file():
                write_digits(base)
    if copies == 1:
        return base / "train.jsonl"
    path = WORK / "data" / f"digits-x{copies}.jsonl"
    if not path.is_file():
        text = (base / "train.jsonl").read_bytes()
        tmp_file = path.with_suffix(f".{os.getpid()}.tmp")
        tmp_file.write_bytes(text * copies)
        tmp_file.rename(path)
    return path


def digits_val() -> Path:
    digits()
    return WORK / "data" / "digits" / "val.jsonl"

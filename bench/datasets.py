"""The benchmark's data, made here from scikit-learn's bundled digits (no download)."""

from __future__ import annotations

from pathlib import Path

from .common import WORK


def digits(copies: int = 1) -> Path:
    """`train.jsonl` of the digits split (1,438 records), repeated `copies` times; cached under bench/.work."""
    base = WORK / "data" / "digits"
    if not (base / "train.jsonl").is_file():
        from trainer.examples.digits_data import write_digits

        write_digits(base)
    if copies == 1:
        return base / "train.jsonl"
    path = WORK / "data" / f"digits-x{copies}.jsonl"
    if not path.is_file():
        text = (base / "train.jsonl").read_bytes()
        tmp = path.with_suffix(".tmp")
        tmp.write_bytes(text * copies)
        tmp.rename(path)
    return path


def digits_val() -> Path:
    digits()
    return WORK / "data" / "digits" / "val.jsonl"

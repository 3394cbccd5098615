"""The digits data the tests train on, from the trainer's own generator (`python -m trainer.examples.digits_data`,
the README's command; its defaults: 20 % validation, seed 0), so every test reads the same records."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "data" / "digits"


def make_digits(dest: Path) -> Path:
    """train.jsonl and val.jsonl in DEST."""
    from trainer.examples.digits_data import write_digits

    write_digits(dest)
    return dest


def example_digits() -> Path:
    """examples/digits.yaml's data folder (scripts/setup.sh writes it; so does this, if missing). Written beside it
    and renamed into place, so a test on another xdist worker never reads a half-written file."""
    if not (EXAMPLE / "train.jsonl").is_file():
        part = make_digits(EXAMPLE.with_name(f".digits-{os.getpid()}"))
        try:
            part.rename(EXAMPLE)
        except OSError:  # another worker's is in place
            shutil.rmtree(part, ignore_errors=True)
    return EXAMPLE

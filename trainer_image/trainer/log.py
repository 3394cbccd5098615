"""Plain log lines, prefixed with the global rank, so interleaved worker output stays readable."""

from __future__ import annotations

import sys


def log(rank: int, message: str) -> None:
    print(f"[rank{rank}] {message}", file=sys.stderr, flush=True)

"""The trainer's heartbeat store client, counting its operations by name: what the store-load tests assert on."""

from __future__ import annotations

from collections import Counter
from typing import Any

from trainer.heartbeat import BeatStore


class Counting(BeatStore):
    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        self.ops: Counter[str] = Counter()

    def call(self, op: str, *args: Any) -> Any:
        self.ops[op] += 1
        return super().call(op, *args)

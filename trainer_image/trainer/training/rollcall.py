"""After a collective times out: which ranks are stopped or hung?

gloo and NCCL only say "timed out waiting for recv"; they never name the peer that went quiet.
Every live rank that hits the timeout checks in through the rendezvous store (which lives in the
torchrun agent, not in a worker) and waits a few seconds for the others; ranks that never check
in are the stopped or hung ones, and the error message names them.
"""

from __future__ import annotations

import time
from datetime import timedelta

import torch.distributed as dist

TIMEOUT_WORDS = ("Timed out", "timed out", "Timeout", "timeout")


def is_timeout(message: str) -> bool:
    return any(word in message for word in TIMEOUT_WORDS)


def silent_ranks(rank: int, world: int, wait_s: float = 3.0) -> list[int] | None:
    """Ranks that did not check in within `wait_s`; None when the store cannot be reached."""
    try:
        store = dist.distributed_c10d._get_default_store()
        store.set_timeout(timedelta(seconds=wait_s))
        store.set(f"trainer/roll_call/{rank}", "here")
        deadline = time.monotonic() + wait_s
        while True:
            missing = [r for r in range(world) if not store.check([f"trainer/roll_call/{r}"])]
            if not missing or time.monotonic() >= deadline:
                return missing
            time.sleep(0.1)
    except Exception:  # the store may live in the very process that hangs: then we cannot tell
        return None


def describe(rank: int, world: int, timeout_s: int, first_line: str) -> str:
    """One line for a timed-out collective, naming the ranks that did not answer."""
    missing = silent_ranks(rank, world)
    if missing:
        who = f"rank {missing[0]}" if len(missing) == 1 else "ranks " + ", ".join(map(str, missing))
        verb = "did" if len(missing) == 1 else "do"
        return (
            f"a collective timed out after timeout_s={timeout_s}s: {who} {verb} not answer "
            f"(stopped or hung); this rank ({rank}) is alive. {first_line}"
        )
    return f"a collective timed out after timeout_s={timeout_s}s (could not tell which rank hung): {first_line}"

"""Named failpoints: make a fault happen at an exact line, so a fault test hits its window every time.

    TRAINER_FAILPOINTS='checkpoint-write@0=1*off->crash;compute@1=slow(40)'

Each entry is `POINT[@RANK]=TERMS`: the point's name (`POINTS`), optionally the one global rank
(`RANK`) it fires on, and gofail's terms (etcd's gofail, doc/design.md "Gofail Term": entries split
by `;`, `Terms = Term {"->" Term}`, `Term = [Mode] Action [Value]`, `Mode = float "%" | int "*"`):
`2*off->crash` does nothing on the first two hits and crashes on the third, `30%slow(10)` sleeps
10 ms on about 30 % of the hits. A term without a count holds for every later hit; after the last
counted term the point is off. Actions:

    off        nothing
    slow(MS)   sleep MS milliseconds (gofail's sleep)
    hang       block the calling thread forever; the process's other threads run on
    pause      SIGSTOP this process: a stopped process at exactly this line (SIGCONT resumes it)
    crash      SIGKILL this process: a `kill -9` at exactly this line (nothing flushed, nothing cleaned)

Inert unless named: with the variable unset or empty, `ACTIVE` is False and a call site is
`if failpoints.ACTIVE: failpoints.hit("name")`, one global lookup and a branch, as FoundationDB's
`BUGGIFY` tests `isGeneralBuggifyEnabled()` before anything else (flow/include/flow/Buggify.h). The
gradient all-reduce's point is a DDP comm hook that is registered only when that point is named.
docs/reliability.md has the figures (bench: `python -m bench --only hang`).
"""

from __future__ import annotations

import os
import random
import re
import signal
import sys
import threading
import time
from dataclasses import dataclass, field

from .errors import TrainerInputError

ENV = "TRAINER_FAILPOINTS"
POINTS = {
    "checkpoint-write": "inside the checkpoint write: state.pt written and fsynced, meta.json not yet (rank 0)",
    "checkpoint-publish": "between publish and rename: meta.json written, the .tmp-* folder not yet renamed (rank 0)",
    "allreduce": "inside the gradient all-reduce: DDP's comm hook, before this rank joins the bucket's all-reduce",
    "heartbeat": "in the hang watchdog's thread, before it publishes this rank's heartbeat",
    "start-up": "in the trainer's start, after the watchdog's first heartbeat, before the process group is set up",
    "compute": "inside each optimizer step, before the forward pass (this rank's compute time)",
    "launcher-output": "in the launcher, for each line a worker prints, before it is passed on",
}
ACTIONS = ("off", "slow", "hang", "pause", "crash")
_TERM = re.compile(r"^(?:(?P<pct>\d+(?:\.\d+)?)%|(?P<count>\d+)\*)?(?P<action>[a-z]+)(?:\((?P<value>[^)]*)\))?$")


@dataclass
class Term:
    action: str
    ms: float = 0.0  # slow
    count: int | None = None  # `N*`: this many hits, then the next term
    percent: float | None = None  # `P%`: each hit fires with this probability


@dataclass
class Point:
    name: str
    rank: int | None
    terms: list[Term]
    hits: int = 0
    _index: int = 0
    _used: int = 0
    _random: random.Random = field(default_factory=random.Random)

    def next_term(self) -> Term | None:
        """The term this hit runs (None: off for good), advancing the chain."""
        self.hits += 1
        while self._index < len(self.terms):
            term = self.terms[self._index]
            if term.count is None:
                if term.percent is not None and self._random.random() * 100 >= term.percent:
                    return None
                return term
            if self._used < term.count:
                self._used += 1
                return term
            self._index, self._used = self._index + 1, 0
        return None


def _term(text: str, entry: str) -> Term:
    found = _TERM.match(text.strip())
    if not found or found["action"] not in ACTIONS:
        raise TrainerInputError(
            f"{ENV}: {entry!r}: term {text!r} is not [N*|P%]ACTION[(VALUE)] with ACTION one of {', '.join(ACTIONS)}"
        )
    action, value = found["action"], found["value"]
    ms = 0.0
    if action == "slow":
        try:
            ms = float(value or "")
        except ValueError:
            raise TrainerInputError(f"{ENV}: {entry!r}: slow needs milliseconds, e.g. slow(50)") from None
    elif value not in (None, ""):
        raise TrainerInputError(f"{ENV}: {entry!r}: {action} takes no value")
    count = int(found["count"]) if found["count"] else None
    percent = float(found["pct"]) if found["pct"] else None
    return Term(action, ms=ms, count=count, percent=percent)


def parse(text: str) -> dict[str, list[Point]]:
    """`POINT[@RANK]=TERMS;...` -> the points by name; a typo is an error that lists the points."""
    points: dict[str, list[Point]] = {}
    for entry in (e.strip() for e in text.split(";")):
        if not entry:
            continue
        target, sep, terms = entry.partition("=")
        name, _, rank = target.strip().partition("@")
        if not sep or name not in POINTS:
            raise TrainerInputError(
                f"{ENV}: {entry!r}: expected POINT[@RANK]=TERMS with POINT one of {', '.join(POINTS)}"
            )
        if rank and not rank.isdigit():
            raise TrainerInputError(f"{ENV}: {entry!r}: @{rank} is not a rank number")
        chain = [_term(t, entry) for t in terms.split("->")]
        point = Point(name, int(rank) if rank else None, chain, _random=random.Random(f"{entry}:{os.getpid()}"))
        points.setdefault(name, []).append(point)
    return points


try:
    _POINTS, _ERROR = parse(os.environ.get(ENV, "")), None
except TrainerInputError as _exc:  # raised by check(), where the caller turns it into exit 2
    _POINTS, _ERROR = {}, _exc
ACTIVE = bool(_POINTS)
"""False unless TRAINER_FAILPOINTS names a point: call sites test it before calling `hit`."""
_LOCK = threading.Lock()


def check() -> None:
    """Raise the TrainerInputError of a malformed TRAINER_FAILPOINTS (the trainer and launcher exit 2)."""
    if _ERROR is not None:
        raise _ERROR


def named(name: str) -> bool:
    """Whether `name` fires anywhere in this process (for points that cost something to set up)."""
    rank = _rank()
    return any(p.rank in (None, rank) for p in _POINTS.get(name, ()))


def _rank() -> int | None:
    value = os.environ.get("RANK", "")
    return int(value) if value.isdigit() else None


def hit(name: str) -> None:
    """Run the action the point `name` holds for this hit (nothing when it is not named)."""
    rank = _rank()
    for point in _POINTS.get(name, ()):
        if point.rank not in (None, rank):
            continue
        with _LOCK:
            term = point.next_term()
            first = point.hits == 1
        if term is not None:
            _act(point, term, first)


def _act(point: Point, term: Term, first: bool) -> None:
    if term.action == "off":
        return
    if term.action != "slow" or first:  # a slow point says so once, not at every step
        who = f"rank {_rank()}" if _rank() is not None else f"pid {os.getpid()}"
        print(f"failpoint {point.name} ({who}, hit {point.hits}): {term.action}", file=sys.stderr, flush=True)
    if term.action == "slow":
        time.sleep(term.ms / 1000)
    elif term.action == "hang":
        threading.Event().wait()
    elif term.action == "pause":
        os.kill(os.getpid(), signal.SIGSTOP)
    elif term.action == "crash":
        os.kill(os.getpid(), signal.SIGKILL)

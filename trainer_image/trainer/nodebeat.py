"""One heartbeat publisher per node: the node's first local rank sends its node's beats in one store call.

Why: a rank that sets its own beat and reads the declaration is 2 store operations per rank per beat; at
8,192 ranks and the fastest beat (1 s) that is 16,384 operations a second, more than half the store's
capacity measured here (docs/scale.md). Through a board on the node's own disk, the folder of the
launcher's status file (every local worker already writes its status and local beat there), each rank
writes its beat to a file; the node's leader (local rank 0) sends every local beat in one `multi_set`,
reads the declaration once and leaves it on the board, where its siblings read it: 2 operations per node
per beat, 8 x fewer with 8 ranks a node. The keys (`beat/<rank>`) stay the same, so the declarer's roll
call, `heartbeat.BeatStore.beats` and `heartbeat.diagnose` read what they read before.

A leader that stops (SIGSTOP, a kernel that never returns to its watchdog) stops stamping the board: after
`stale_s` (3 beats, at least a store call's timeout and 2 beats) each sibling publishes through the store itself again, so a stopped leader never
silences its node, and only the leader's own beat ages. A leader that cannot reach the store says so on
the board, and the siblings then try themselves once it has failed for as long (and find the store
unreachable on their own).

A sibling opens its own store connection only when it must publish itself (its leader went quiet, or it
declares a hang its leader has not): the store holds one connection per node, not one per rank. Every
connection costs the store's one event-loop thread a reverse DNS lookup of the peer's address (torch's
`UvTcpSocket::startRead` -> `formatSockAddr` -> `getnameinfo`, torch/csrc/distributed/c10d/
TCPStoreLibUvBackend.cpp and socket.cpp), which blocks every other client while it waits. In a hang a
sibling's answer to the roll call goes through the board too (`answer`): the leader sends its node's
answers as they come (`relay_answers`) and says which on the board (`relayed`); a sibling that sees no
relay in time answers through the store itself.

Used from `FROM_WORLD` ranks (`TRAINCTL_NODE_BEATS=1` or `0` forces it on or off): below that the store's
load is far from its capacity and a run behaves as it did before this board.
"""

from __future__ import annotations

import contextlib
import json
import os
import time
from pathlib import Path
from typing import TYPE_CHECKING

from .status import ENV as STATUS_ENV

if TYPE_CHECKING:
    from .heartbeat import BeatStore

FROM_WORLD = 64
STALE_BEATS = 3.0  # a leader stamp older than this many beat intervals: the siblings publish themselves
STORE_TIMEOUT_S = 5.0  # a watchdog's store call gives up after this (hang.py): a leader waiting in one is alive
ENV = "TRAINCTL_NODE_BEATS"
STAMP = "leader.json"
RELAYED = "relayed.json"  # the ranks whose roll-call answers the leader has sent
REPORTED = "reported"  # the leader saw the hang's record written: its siblings may exit
POLL_S = 0.25  # a leader's look for its siblings' answers; a sibling's for the relay (local files)


def wanted(world: int) -> bool:
    """Whether a world this size beats per node (`ENV` forces it on or off)."""
    forced = os.environ.get(ENV)
    return forced == "1" or (forced != "0" and world >= FROM_WORLD)


def stale_s(interval_s: float) -> float:
    """How old a leader's stamp may grow before its siblings publish themselves: 3 beats, and at least one store
    call's timeout and 2 beats (a leader stamps before and after its calls, so one that waits in a slow call
    is not taken for a stopped one, and its 7 siblings do not all connect to a store that is slow already)."""
    return max(STALE_BEATS * interval_s, STORE_TIMEOUT_S + 2 * interval_s)


def _write(path: Path, text: str) -> None:
    """Atomic: a reader sees the old file or the new one, never half of one."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


class NodeBoard:
    """This node's beats on its local disk; `relay` is a rank's whole heartbeat when the board is in use."""

    def __init__(self, folder: Path, rank: int, leader: bool, local_world: int = 0) -> None:
        self.folder, self.rank, self.leader, self.local_world = folder, rank, leader, local_world
        self.since = time.time()  # a leader that never stamped gets as long as a stamp's age allows from here
        self.failing_since: float | None = None  # the leader: its store calls fail since then
        self.declared: str | None = None  # the leader: the declaration it last read
        folder.mkdir(parents=True, exist_ok=True)

    @classmethod
    def from_env(cls, rank: int, world: int) -> NodeBoard | None:
        """The board beside the launcher's status file, per attempt; None where the launcher left none (a
        worker started by hand), a node runs one rank, or the world is small (see the module's docstring)."""
        status = os.environ.get(STATUS_ENV)
        if not wanted(world) or not status or int(os.environ.get("LOCAL_WORLD_SIZE", "1")) < 2:
            return None
        attempt = os.environ.get("TORCHELASTIC_RESTART_COUNT", "0")
        folder = Path(status).parent / f"nodebeat-{attempt}"
        local = int(os.environ.get("LOCAL_WORLD_SIZE", "1"))
        return cls(folder, rank, leader=os.environ.get("LOCAL_RANK", "0") == "0", local_world=local)

    def relay(
        self, rank_beat: str, store: BeatStore, declared_key: str, interval_s: float
    ) -> tuple[bool, str | None] | None:
        """Leave this rank's beat on the board; (published, the declaration or None) as the leader last saw
        them, or None when the leader is not stamping (then the caller publishes through the store)."""
        if not self.leave(rank_beat):
            return None
        if self.leader:
            return self._publish(store, declared_key)
        stamp = self._stamp(interval_s)
        if stamp is None:
            return None
        declared = stamp.get("declared")
        return True, declared if isinstance(declared, str) else None

    def _stamp(self, interval_s: float) -> dict[str, object] | None:
        """The leader's stamp while it is fresh and says it published. Before its first stamp: "nothing declared"
        for as long as a stamp may age (the leader's first beat may come after a sibling's)."""
        try:
            stamp = json.loads((self.folder / STAMP).read_text())
        except (OSError, ValueError):
            return {"declared": None} if time.time() - self.since <= stale_s(interval_s) else None
        now, allowed = time.time(), stale_s(interval_s)
        if now - float(stamp.get("at", 0.0)) > allowed:
            return None
        if not stamp.get("published") and now - float(stamp.get("failing_since") or 0.0) > allowed:
            return None  # its leader has not reached the store for as long as a stamp may age
        return dict(stamp)

    def stamping(self, interval_s: float) -> bool:
        """The leader stamps the board (a sibling's beats and answers reach the store through it)."""
        return self._stamp(interval_s) is not None

    def leave(self, rank_beat: str) -> bool:
        """This rank's latest beat on the board (also its answer's beat in a hang: the leader must not send an
        older one over it)."""
        try:
            _write(self.folder / f"rank-{self.rank}.json", rank_beat)
        except OSError:
            return False
        return True

    def beats(self) -> dict[str, str]:
        """Every local rank's latest beat on the board, by store key."""
        found: dict[str, str] = {}
        for entry in os.scandir(self.folder):
            if entry.name.startswith("rank-") and entry.name.endswith(".json"):
                try:
                    found[f"beat/{entry.name[5:-5]}"] = Path(entry.path).read_text()
                except OSError:
                    continue
        return found

    def _publish(self, store: BeatStore, declared_key: str) -> tuple[bool, str | None]:
        """The leader: the node's beats in one `multi_set`, the declaration in one read, both on the board."""
        self.stamp(self.failing_since is None, self.declared)  # alive, whatever the store calls below take
        beats = self.beats()
        keys = sorted(beats)
        published = store.call("multi_set", keys, [beats[k] for k in keys]) is not None
        found = store.read(declared_key) if published else None
        self.declared = found.decode() if isinstance(found, bytes) else None
        self.stamp(published, self.declared)
        return published, self.declared

    def stamp(self, published: bool, declared: str | None) -> None:
        """The leader: what its siblings read instead of the store (a hang's declaration as soon as it has it), and
        since when it has failed to reach the store: one slow connect does not send 7 siblings to connect too."""
        now = time.time()
        self.failing_since = None if published else (self.failing_since or now)
        text = json.dumps(
            {"at": now, "published": published, "declared": declared, "failing_since": self.failing_since}
        )
        with contextlib.suppress(OSError):  # the siblings then publish themselves (a stale stamp)
            _write(self.folder / STAMP, text)

    # a hang's roll call through the board
    def answer(self, rank_beat: str) -> None:
        """A sibling's answer to the roll call (its beat then), for its leader to send."""
        with contextlib.suppress(OSError):
            _write(self.folder / f"answer-{self.rank}.json", rank_beat)

    def relay_answers(self, store: BeatStore, until: float, answered_key: str, count_key: str) -> set[int]:
        """The leader: send its siblings' answers as they come (their beats in one `multi_set`, their ranks in one
        `append`, their count in one `add`), until every sibling has answered or `until` (monotonic) passes."""
        sent: set[int] = set()
        while True:
            fresh: dict[int, str] = {}
            for entry in os.scandir(self.folder):
                name = entry.name
                if name.startswith("answer-") and name.endswith(".json") and int(name[7:-5]) not in sent:
                    with contextlib.suppress(OSError):
                        fresh[int(name[7:-5])] = Path(entry.path).read_text()
            if fresh:
                ranks = sorted(fresh)
                ok = store.call("multi_set", [f"beat/{r}" for r in ranks], [fresh[r] for r in ranks]) is not None
                ok = ok and store.call("append", answered_key, "".join(f"{r}," for r in ranks)) is not None
                if not ok or store.call("add", count_key, len(ranks)) is None:
                    return sent  # the store failed it: its siblings see no relay and answer themselves
                sent.update(ranks)
                with contextlib.suppress(OSError):
                    _write(self.folder / RELAYED, json.dumps(sorted(sent)))
            if (self.local_world and len(sent) >= self.local_world - 1) or time.monotonic() >= until:
                return sent
            time.sleep(POLL_S)

    def relayed(self, until: float) -> bool:
        """A sibling: whether its leader sent its answer before `until` (monotonic)."""
        while True:
            with contextlib.suppress(OSError, ValueError):
                if self.rank in json.loads((self.folder / RELAYED).read_text()):
                    return True
            if time.monotonic() >= until:
                return False
            time.sleep(POLL_S)

    def mark_reported(self) -> None:
        """The leader: the hang's record is written (or its wait is over): its siblings may exit."""
        with contextlib.suppress(OSError):
            (self.folder / REPORTED).touch()

    def wait_reported(self, until: float) -> None:
        """A sibling answered through the board: it waits for its leader's word that the record is written."""
        while not (self.folder / REPORTED).exists() and time.monotonic() < until:
            time.sleep(4 * POLL_S)

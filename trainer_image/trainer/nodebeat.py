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
`STALE_BEATS` beats each sibling publishes through the store itself again, so a stopped leader never
silences its node, and only the leader's own beat ages. A leader that cannot reach the store says so on
the board, and the siblings then try themselves (and find the store unreachable on their own).

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
ENV = "TRAINCTL_NODE_BEATS"
STAMP = "leader.json"


def wanted(world: int) -> bool:
    """Whether a world this size beats per node (`ENV` forces it on or off)."""
    forced = os.environ.get(ENV)
    return forced == "1" or (forced != "0" and world >= FROM_WORLD)


def _write(path: Path, text: str) -> None:
    """Atomic: a reader sees the old file or the new one, never half of one."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


class NodeBoard:
    """This node's beats on its local disk; `relay` is a rank's whole heartbeat when the board is in use."""

    def __init__(self, folder: Path, rank: int, leader: bool) -> None:
        self.folder, self.rank, self.leader = folder, rank, leader
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
        return cls(folder, rank, leader=os.environ.get("LOCAL_RANK", "0") == "0")

    def relay(
        self, rank_beat: str, store: BeatStore, declared_key: str, interval_s: float
    ) -> tuple[bool, str | None] | None:
        """Leave this rank's beat on the board; (published, the declaration or None) as the leader last saw
        them, or None when the leader is not stamping (then the caller publishes through the store)."""
        if not self.leave(rank_beat):
            return None
        if self.leader:
            return self._publish(store, declared_key)
        try:
            stamp = json.loads((self.folder / STAMP).read_text())
        except (OSError, ValueError):
            return None
        if time.time() - float(stamp.get("at", 0.0)) > STALE_BEATS * interval_s or not stamp.get("published"):
            return None
        return True, stamp.get("declared")

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
        beats = self.beats()
        keys = sorted(beats)
        published = store.call("multi_set", keys, [beats[k] for k in keys]) is not None
        found = store.read(declared_key) if published else None
        declared = found.decode() if isinstance(found, bytes) else None
        with contextlib.suppress(OSError):  # the siblings then publish themselves (a stale stamp)
            _write(self.folder / STAMP, json.dumps({"at": time.time(), "published": published, "declared": declared}))
        return published, declared

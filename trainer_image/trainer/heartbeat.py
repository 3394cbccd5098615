"""Every rank's heartbeat, where every other rank can read it, and who is to blame when they stall.

Where: the c10d TCPStore that torchrun's agent hosts on the first node (`MASTER_ADDR:MASTER_PORT`,
the store every worker already met through; `distributed.init` prefixes it per attempt). It needs
no new port, file system or service; it lives in the agent, not in a worker, so a stopped or hung
worker does not take it down; and every rank has reached it once. Each watchdog opens a client
connection of its own with a short timeout, so a store that stops answering costs a few seconds,
never a blocked thread, and the trainer's own store is not touched. A shared file system was the
other candidate: it is not there on every target (Kubernetes without a RWX volume), and a node cut
off from the network may still reach its local disk, so its heartbeat would look fresh.

What: `Beat`, published about every 10 % of the hang deadline by the watchdog thread: the last
completed step and when, when the beat was written, and how many collectives this rank has issued
(the process group's sequence number). In a hang every rank's step stalls at once, so "last step"
alone blames no one; a beat that stops coming does (the process is stopped, dead or cut off), and
so does a rank that still beats but issued fewer collectives than the others (it never joined the
one they wait in: stuck in its own code, data or a hung kernel).

When the store's own node is the stopped one, only its worker is stopped: the agent still answers.
When that node is dead or cut off, ranks elsewhere cannot reach the store: each says so and names
that node (`unreachable`), while the ranks on that node, which still reach it, see every other
node go silent. With two nodes the two views are symmetric and the evidence cannot say which side
was cut off; docs/trainer.md says how the record reads then.
"""

from __future__ import annotations

import json
import os
import socket
import time
from collections.abc import Collection
from dataclasses import asdict, dataclass
from datetime import timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .status import ENV as STATUS_ENV

if TYPE_CHECKING:  # torch is imported where it is used: the launcher reads node_name without it
    import torch.distributed as dist


def node_name() -> str:
    """This host's name as a scheduler knows it: `TRAINCTL_NODE_NAME` where a target passes it
    (a Kubernetes pod's node, from the downward API), else the host name (SLURM's node names)."""
    return os.environ.get("TRAINCTL_NODE_NAME") or socket.gethostname()


def collectives_issued() -> int:
    """How many collectives this rank has issued on the default group (its c10d sequence number;
    -1 when the backend keeps none). Read from the watchdog thread while the main thread may be
    blocked inside one."""
    import torch.distributed as dist

    try:
        return int(dist.distributed_c10d._get_default_group()._get_sequence_number_for_group())  # type: ignore[attr-defined]
    except Exception:
        return -1


@dataclass(frozen=True)
class Beat:
    rank: int
    node: str
    pid: int
    step: int  # the last completed step (the same on every rank once it completed)
    step_at: float  # wall time it completed
    at: float  # wall time of this beat
    collectives: int
    phase: str  # "step", or the long phase the loop is in ("checkpoint", "evaluate", ...)

    def text(self) -> str:
        return json.dumps(asdict(self), separators=(",", ":"))

    @classmethod
    def parse(cls, text: bytes | str) -> Beat | None:
        try:
            return cls(**json.loads(text))
        except (ValueError, TypeError):
            return None


@dataclass(frozen=True)
class LocalBeat:
    """The same heartbeat for this node's launcher, in a file beside its status file (no network: a node cut
    off must still judge its own workers at teardown, `teardown.py`): when it was written and the hang
    deadline then in force."""

    at: float
    deadline_s: float


def local_beat_path(status_file: Path, pid: int) -> Path:
    return status_file.with_name(f"beat-{pid}.json")


def publish_local(deadline_s: float) -> None:
    """Best effort, like the status file: no launcher (a worker started by hand) means no file."""
    status = os.environ.get(STATUS_ENV)
    if not status:
        return
    path = local_beat_path(Path(status), os.getpid())
    try:
        tmp = path.with_name(f".{path.name}.tmp")
        tmp.write_text(json.dumps(asdict(LocalBeat(time.time(), deadline_s))))
        os.replace(tmp, path)
    except OSError:
        pass


def read_local(status_file: Path, pid: int) -> LocalBeat | None:
    try:
        return LocalBeat(**json.loads(local_beat_path(status_file, pid).read_text()))
    except (OSError, ValueError, TypeError):
        return None


@dataclass(frozen=True)
class Suspect:
    node: str
    rank: int | None
    heartbeat_age_s: float | None
    why: str

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def late_ranks(beats: dict[int, Beat | None], answered: set[int], world: int, alive_after: float | None) -> list[int]:
    """The ranks that did not answer the roll call but beat after `alive_after` (epoch seconds, well inside the
    stall): alive while the others waited, so not what stopped them; late to answer (a starved or overloaded host).
    At 2,048 stand-in ranks on 2 cores, 35 such ranks beat 4-5 s before the report and missed the 5 s roll call;
    naming them blamed (and a retry left out) 35 healthy nodes (docs/scale.md)."""
    if alive_after is None:
        return []
    return [r for r in range(world) if r not in answered and (b := beats.get(r)) is not None and b.at > alive_after]


def diagnose(
    beats: dict[int, Beat | None], answered: set[int], world: int, now: float, late: Collection[int] = ()
) -> list[Suspect]:
    """Suspects of a hang: the ranks that did not answer the roll call and are not `late` (`late_ranks`: they
    beat during the stall), whose heartbeat stopped (stopped, dead or cut off); then the ranks that answered but
    issued fewer collectives than the most any answering rank issued (they never joined the collective the
    others wait in). The late ranks are suspects only when there is no other."""
    suspects: list[Suspect] = []
    for rank in range(world):
        beat = beats.get(rank)
        if rank in answered or rank in late:
            continue
        if beat is None:
            suspects.append(
                Suspect("unknown", rank, None, "never published a heartbeat and did not answer the roll call")
            )
            continue
        age = round(now - beat.at, 1)
        why = f"no heartbeat for {age:g} s and no answer to the roll call: stopped, dead or cut off"
        suspects.append(Suspect(beat.node, rank, age, why))
    live = [b for r, b in sorted(beats.items()) if r in answered and b is not None and b.collectives >= 0]
    if live:
        most = max(b.collectives for b in live)
        for beat in live:
            if beat.collectives < most:
                why = (
                    f"alive but behind: issued {beat.collectives} collectives, the others {most}; it never "
                    f"joined the one they wait in (stuck in its own {beat.phase}: see its stacks)"
                )
                suspects.append(Suspect(beat.node, beat.rank, round(now - beat.at, 1), why))
    if not suspects:
        for rank in sorted(set(late)):
            beat = beats[rank]
            assert beat is not None
            age = round(now - beat.at, 1)
            why = f"no answer to the roll call, though it beat {age:g} s ago, during the stall: slow to answer, or stopped since"
            suspects.append(Suspect(beat.node, rank, age, why))
    return suspects


class BeatStore:
    """This rank's own client of the rendezvous store: every call gives up after `timeout_s` and
    returns None (the connection is made again on the next call), so the watchdog never blocks."""

    def __init__(self, host: str, port: int, prefix: str, timeout_s: float) -> None:
        self.host, self.port, self.prefix, self.timeout_s = host, port, prefix, timeout_s
        self._store: dist.Store | None = None
        self.reachable = True

    @classmethod
    def from_env(cls, timeout_s: float) -> BeatStore:
        attempt = os.environ.get("TORCHELASTIC_RESTART_COUNT", "0")
        host, port = os.environ.get("MASTER_ADDR", "127.0.0.1"), int(os.environ.get("MASTER_PORT", "0"))
        return cls(host, port, f"/trainer/attempt_{attempt}/watch/", timeout_s)

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    def _client(self) -> dist.Store:
        import torch.distributed as dist

        if self._store is None:
            raw = dist.TCPStore(
                self.host, self.port, is_master=False, timeout=timedelta(seconds=self.timeout_s), wait_for_workers=False
            )
            self._store = dist.PrefixStore(self.prefix, raw)
        return self._store

    def call(self, op: str, *args: Any) -> Any:
        try:
            result = getattr(self._client(), op)(*args)
        except Exception:
            self._store, self.reachable = None, False
            return None
        self.reachable = True
        return result if result is not None else True

    @property
    def connected(self) -> bool:
        """A connection is open (the first call made it, and no call has failed since)."""
        return self._store is not None

    def has(self, key: str) -> bool:
        return bool(self.call("check", [key]))

    def read(self, key: str) -> bytes | None:
        found = self.call("get", key) if self.has(key) else None
        return found if isinstance(found, bytes) else None

    def beats(self, world: int, answered: set[int] | frozenset[int] = frozenset()) -> dict[int, Beat | None]:
        """Every rank's beat: those of the ranks that answered the roll call (each set its beat first) in one
        `multi_get`, the others one by one (check, then get: a rank may never have beaten)."""
        found: dict[int, Beat | None] = {}
        have = sorted(answered)
        got = self.call("multi_get", [f"beat/{r}" for r in have]) if have else None
        if isinstance(got, list) and len(got) == len(have):
            found.update({r: Beat.parse(text) if text else None for r, text in zip(have, got, strict=True)})
        for rank in range(world):
            if rank not in found:
                text = self.read(f"beat/{rank}")
                found[rank] = Beat.parse(text) if text else None
        return found

"""The hang watchdog: a thread on every rank that sees a stall while the main thread is stuck in C++.

A collective waits for its peers until the process group's `timeout_s` (torch's default 30 min for
gloo, 10 min for NCCL) and then says only that it timed out. The watchdog (a `StepListener`)
starts before the process group is set up and declares a hang as soon as no step has completed
within the hang deadline:

- during the start (rendezvous, process group, data loading, model build, resume: where bad nodes
  show up first at scale), `trainer.startup_timeout`, else `startup_deadline`: max(30 s,
  6 x hang_timeout) with hang_timeout, else 300 s, plus 20 ms per rank (the store serves each
  rank's joins one after another), at most 0.8 x timeout_s;

- `trainer.hang_timeout` when set (less than `timeout_s`), from the first completed step on;
- otherwise adaptive: `min(0.8 x timeout_s, max(60 s, 10 x the slowest of the last 100 steps))`
  once 10 steps are done, and `min(0.8 x timeout_s, 300 s)` before (torchtitan's
  `comm.init_timeout_seconds` is 300 s for initialisation and the first step);
- inside a long phase the loop announces (a checkpoint save, an evaluation, the end), at least 10 x
  the longest of that phase so far, or 300 s the first time (capped at 0.8 x timeout_s): a save that
  takes long is not a hang, and one that takes ten times its usual is.

Every beat (about a tenth of the deadline, 1-10 s) it publishes this rank's `heartbeat.Beat` and
looks for a hang declared by another rank: from `nodebeat.FROM_WORLD` ranks on through its node's board,
where the node's first rank sends every local beat in one store call (`nodebeat.py`). On a hang (declared here, or seen there) each live rank
writes every thread's Python stack into its log and its flight-recorder dump into the output
folder, then answers the roll call; the first rank to declare waits for the answers, names the
suspects (`heartbeat.diagnose`), writes `failure.json`, and every live rank exits EXIT_HANG.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
import threading
import time
import traceback
from collections import deque
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

from .. import failpoints, records
from ..exit_codes import EXIT_HANG
from ..heartbeat import Beat, BeatStore, Suspect, collectives_issued, diagnose, late_ranks, node_name, publish_local
from ..nodebeat import STORE_TIMEOUT_S, NodeBoard
from ..status import write_status
from .steps import StepDone

STARTUP = "start-up"
PER_RANK_S = 0.02
WARMUP_STEPS = 10
WARMUP_S = 300.0
FLOOR_S = 60.0
FACTOR = 10.0
WINDOW = 100
CAP = 0.8  # of timeout_s
DECLARED = "declared"
REPORTED = "reported"  # set by the declarer once failure.json is written
ANSWERS = "rollcall_answers"  # how many ranks answered the roll call (each adds 1 once)
ANSWERED = "rollcall_ranks"  # who answered: each appends "<rank>," once, the declarer reads it in one get


def hang_deadline(explicit: int | None, timeout_s: int, gaps: list[float], steps_done: int) -> tuple[float, str]:
    """(seconds without a completed step that make a hang, the rule that gave them)."""
    cap = CAP * timeout_s
    if explicit is not None and steps_done > 0:
        return float(explicit), "trainer.hang_timeout"
    if explicit is not None:
        return max(
            float(explicit), min(cap, WARMUP_S)
        ), "before the first step: max(hang_timeout, min(0.8 x timeout_s, 300 s))"
    if steps_done < WARMUP_STEPS or not gaps:
        return min(cap, WARMUP_S), f"warm-up (fewer than {WARMUP_STEPS} steps): min(0.8 x timeout_s, 300 s)"
    return min(cap, max(FLOOR_S, FACTOR * max(gaps))), (
        f"adaptive: min(0.8 x timeout_s, max(60 s, 10 x the slowest of the last {len(gaps)} steps = {max(gaps):.3g} s))"
    )


def startup_deadline(explicit: int | None, hang_timeout: int | None, timeout_s: int, world: int) -> tuple[float, str]:
    """(seconds the start may take, the rule that gave them): see the module's docstring."""
    if explicit is not None:
        return float(explicit), "trainer.startup_timeout"
    base, said = (max(30.0, 6.0 * hang_timeout), "max(30 s, 6 x hang_timeout)") if hang_timeout else (WARMUP_S, "300 s")
    limit = min(CAP * timeout_s, base + PER_RANK_S * world)
    return limit, f"start-up: {said} + 20 ms x {world} ranks, at most 0.8 x timeout_s"


def stack_lines() -> list[str]:
    """Every other thread's Python stack, innermost call last, as the log shows them."""
    names = {t.ident: t.name for t in threading.enumerate()}
    lines: list[str] = []
    for ident, frame in sys._current_frames().items():
        if ident == threading.get_ident():
            continue  # the watchdog itself
        lines.append(f"thread {names.get(ident, '?')} ({ident}):")
        for entry in traceback.format_stack(frame):
            lines.extend("  " + part for part in entry.rstrip().splitlines())
    return lines


def say(rank: int, lines: list[str]) -> None:
    """One write of many log lines, each with the rank prefix (log.log's form)."""
    sys.stderr.write("".join(f"[rank{rank}] {line}\n" for line in lines))
    sys.stderr.flush()


class HangWatch:
    """One rank's hang watchdog; `run()` holds it around the loop (`with watch.running():`)."""

    def __init__(self, hang_timeout: int | None, timeout_s: int, rank: int, world: int, output_dir: Path,
                 backend: str, step: int, startup_timeout: int | None = None) -> None:  # fmt: skip
        self.explicit, self.timeout_s, self.rank, self.world = hang_timeout, timeout_s, rank, world
        self.startup = startup_deadline(startup_timeout, hang_timeout, timeout_s, world)
        self.first_beat = threading.Event()  # set once this rank's first heartbeat is published
        self.output_dir, self.backend, self.node = output_dir, backend, node_name()
        self.steps_done, self.step, self.step_at = 0, step, time.time()
        self.since = time.monotonic()  # the stall clock: the last step, or the end of a long phase
        self.gaps: deque[float] = deque(maxlen=WINDOW)
        self.phase, self.phase_since = "step", 0.0
        self.longest: dict[str, float] = {}  # the longest run of each long phase so far
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.board: NodeBoard | None = None  # this node's beats, sent by its leader (`start`, nodebeat.py)

    # the loop's side
    def on_step(self, done: StepDone, /) -> None:
        self.steps_done += 1
        if self.steps_done > WARMUP_STEPS // 2:  # the first steps' set-up is not a step time
            self.gaps.append(done.timing.wall_s)
        self.step, self.step_at, self.since = done.step, time.time(), time.monotonic()

    @contextlib.contextmanager
    def long_phase(self, name: str) -> Iterator[None]:
        """A stretch that may outlast a step by far (its collectives still time out at timeout_s)."""
        self.phase, self.phase_since = name, time.monotonic()
        try:
            yield
        finally:
            now = time.monotonic()
            self.longest[name] = max(self.longest.get(name, 0.0), now - self.phase_since)
            self.phase, self.since = "step", max(self.since, now)

    def start(self) -> None:
        """Watch from now on, the start first (before the process group is set up: `Trainer.__init__`)."""
        self.store = BeatStore.from_env(timeout_s=STORE_TIMEOUT_S)  # torchrun's agent store (a lone process: D.init's)
        if self.board is None:
            self.board = NodeBoard.from_env(self.rank, self.world)
        self.phase, self.phase_since = STARTUP, time.monotonic()
        self._thread = threading.Thread(target=self._watch, name="hang-watchdog", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=2.0)  # a daemon: one stuck in a store call (or a failpoint) is left behind

    @contextlib.contextmanager
    def running(self) -> Iterator[None]:
        """The loop: the start is over (the first step has the warm-up deadline); the watch stops at its end."""
        if self._thread is None:
            self.start()
        self.phase, self.since = "step", time.monotonic()
        try:
            yield
        finally:
            self.stop()

    def deadline(self) -> tuple[float, str]:
        if self.phase == STARTUP:
            return self.startup
        limit, rule = hang_deadline(self.explicit, self.timeout_s, list(self.gaps), self.steps_done)
        if self.phase == "step":
            return limit, rule
        seen = self.longest.get(self.phase)
        allowance = FACTOR * seen if seen is not None else WARMUP_S
        if allowance <= limit:
            return limit, f"{rule}, inside {self.phase}"
        first = f"its first {self.phase}: 300 s" if seen is None else f"10 x its longest {self.phase} ({seen:.3g} s)"
        return min(CAP * self.timeout_s, allowance), f"inside {self.phase}: {first}, at most 0.8 x timeout_s"

    # the watchdog thread
    def _beat(self) -> Beat:
        return Beat(self.rank, self.node, os.getpid(), self.step, round(self.step_at, 3), round(time.time(), 3),
                    collectives_issued(), self.phase)  # fmt: skip

    def _watch(self) -> None:
        while not self._stop.is_set():
            limit, rule = self.deadline()
            if failpoints.ACTIVE:
                failpoints.hit("heartbeat")
            publish_local(limit)  # first: this node's launcher reads it at teardown, whatever the network does
            published, declared = self._publish(min(10.0, max(1.0, limit / 10)))
            self.first_beat.set()
            stalled = time.monotonic() - max(self.since, self.phase_since if self.phase != "step" else 0.0)
            if self._stop.is_set():
                return
            if declared is not None:
                self._hang(json.loads(declared), limit, rule, stalled)
            elif stalled > limit and self._may_declare():
                mine = json.dumps(
                    {"rank": self.rank, "node": self.node, "step": self.step, "stalled_s": round(stalled, 1)}
                )
                won = self.store.call("compare_set", DECLARED, "", mine) if published else None
                self._hang(json.loads(won) if isinstance(won, bytes) else json.loads(mine), limit, rule, stalled)
            self._stop.wait(min(10.0, max(1.0, limit / 10)))

    def _may_declare(self) -> bool:
        """A sibling whose leader stamps leaves the declaration to its leader, which runs the same stall clock
        (and so does every other node's leader): else every sibling would open its store connection at the
        deadline at once. One whose leader went quiet publishes itself, and declares like any rank."""
        return self.board is None or self.board.leader or self.store.connected

    def _publish(self, interval_s: float) -> tuple[bool, bytes | str | None]:
        """This beat, and the declaration if any: through the node's board while its leader stamps, else
        itself (its store connection is opened then, not before: nodebeat.py)."""
        beat = self._beat().text()
        if self.board is not None:
            relayed = self.board.relay(beat, self.store, DECLARED, interval_s)
            if relayed is not None:
                return relayed
        published = self.store.call("set", f"beat/{self.rank}", beat) is not None
        return published, self.store.read(DECLARED) if published else None  # unreachable: one timeout

    def _hang(self, declared: dict[str, Any], limit: float, rule: str, stalled: float) -> None:
        """Dump, answer, (declarer) diagnose and record, exit EXIT_HANG. Never returns."""
        by_me, began = declared.get("rank") == self.rank, time.monotonic()
        interval = min(10.0, max(1.0, limit / 10))
        if self.board is not None and self.board.leader:  # its siblings see the declaration now, not a beat later
            self.board.stamp(self.store.reachable, json.dumps(declared))
        publish_local(self._roll_call_s(limit) + 15.0)  # alive until it exits: roll call, report, the waits
        head = (
            f"hang: no step completed for {stalled:.1f} s (limit {limit:.1f} s, {rule}); last step {self.step}"
            if by_me else f"hang declared by rank {declared.get('rank')} on {declared.get('node')}; this rank's last step {self.step}"
        )  # fmt: skip
        say(
            self.rank,
            [head, f"stacks of rank {self.rank} (pid {os.getpid()}, node {self.node}), all threads:", *stack_lines()],
        )
        dump = self._dump_flight_recorder()
        beat = self._beat().text()
        board = self.board
        if board is not None:
            board.leave(beat)
        relayed = board is not None and not board.leader and not self.store.connected and board.stamping(interval)
        if relayed and board is not None:  # its leader sends the answer (nodebeat.py): no connection of its own
            board.answer(beat)  # answered itself only if its leader went quiet meanwhile, not if it is slow
            relayed = board.relayed(time.monotonic() + interval + 2.0) or board.stamping(interval)
        if not relayed:
            self.store.call("set", f"beat/{self.rank}", beat)
            self.store.call("append", ANSWERED, f"{self.rank},")
            self.store.call("add", ANSWERS, 1)
        if board is not None and board.leader:  # a sibling sees the declaration on the board up to a beat later
            board.relay_answers(self.store, began + self._roll_call_s(limit) - 1.0, ANSWERED, ANSWERS)
        if by_me or not self.store.reachable:
            self._report(declared, limit, rule, stalled, dump, began)
            self.store.call("set", REPORTED, "1")
        elif relayed and board is not None:
            board.wait_reported(began + self._roll_call_s(limit) + 5.0 + 2 * interval)
        else:
            self._await_report(limit)
        if board is not None and board.leader:
            board.mark_reported()
        write_status("hang", head)
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(EXIT_HANG)

    def _roll_call_s(self, limit: float) -> float:
        """How long the declarer waits for the live ranks' answers: a few beats, one more with the per-node
        heartbeat (a sibling sees the declaration on its board, one leader's beat after the store has it)."""
        return 3.0 + (3 if self.board is not None else 2) * min(10.0, max(1.0, limit / 10))

    def _await_report(self, limit: float) -> None:
        """A rank that did not declare waits (bounded) until the declarer has written failure.json: its own
        exit ends its launcher, which may host the store the declarer's roll call reads, and an operator
        (a JobSet, srun --kill-on-bad-exit) tears the other ranks down as soon as one exits, which killed
        declarers before they wrote the record (a Kubernetes retry then had no node to leave out). One
        `wait` the store answers when the key appears, not a poll: 8,192 ranks polling 5 times a second
        were 41,000 store operations a second (docs/scale.md)."""
        if self.store.reachable and not self.store.has(REPORTED):
            self.store.call("wait", [REPORTED], timedelta(seconds=self._roll_call_s(limit) + 5.0))

    def _roll_call(self, wait_s: float) -> set[int]:
        """Who answered: the answer count is polled (one operation), the list of answers is read once at the
        end (one operation), where reading every rank's answer at each poll cost 5 x N operations a second."""
        deadline = time.monotonic() + wait_s
        while self.store.reachable and time.monotonic() < deadline:
            count = self.store.call("add", ANSWERS, 0)
            if isinstance(count, int) and count >= self.world:
                break
            time.sleep(0.2)
        said = self.store.read(ANSWERED) if self.store.reachable else None
        return {int(r) for r in said.decode().split(",") if r.isdigit() and int(r) < self.world} if said else set()

    def _report(self, declared: dict[str, Any], limit: float, rule: str, stalled: float, dump: str | None,
                began: float) -> None:  # fmt: skip
        wait_s = max(1.0, began + self._roll_call_s(limit) - time.monotonic())  # from the start of its `_hang`
        answered = self._roll_call(wait_s=wait_s) if self.store.reachable else set()
        beats = self.store.beats(self.world, answered) if self.store.reachable else {}
        now = time.time()
        late = late_ranks(beats, answered, self.world, self._alive_after(stalled, began, now))
        if self.store.reachable:
            suspects = diagnose(beats, answered, self.world, now, late)
        else:
            why = (f"the rendezvous store {self.store.address} does not answer: the node that hosts it is dead or cut off, "
                   f"or this node ({self.node}) is")  # fmt: skip
            suspects = [Suspect(self.store.host, 0, None, why)]
        record = {
            "kind": "hang", "source": "trainer", **records.stamp(), "exit_code": EXIT_HANG,
            "step": max([self.step, *(b.step for b in beats.values() if b)]), "stalled_s": round(stalled, 1),
            "hang_timeout_s": round(limit, 1), "hang_timeout_rule": rule, "declared_by": declared,
            "reporter": {"rank": self.rank, "node": self.node},
            "store": {"address": self.store.address, "reachable": self.store.reachable},
            "suspects": [s.to_json() for s in suspects],
            "ranks": [dict(b.__dict__, heartbeat_age_s=round(now - b.at, 1), answered=r in answered)
                      for r, b in sorted(beats.items()) if b],
            "late": [{"rank": r, "node": b.node, "heartbeat_age_s": round(now - b.at, 1)}
                     for r in late if (b := beats.get(r)) is not None],
            "stacks": "in each live rank's log, after its 'hang' line", "flight_recorder": dump,
        }  # fmt: skip
        path = self.output_dir / records.FAILURE
        if not self.store.reachable:  # the ranks that reach the store know more: their record goes first
            time.sleep(10.0)
        written = records.write_failure(self.output_dir, record, replace=self.store.reachable)
        named = "; ".join(f"suspect rank {s.rank} on {s.node}: {s.why}" for s in suspects) or (
            "no suspect: every rank answered and all wait in the same collective (the network between them?)"
        )
        where = f"record {path}" if written else f"record {path} already written by another rank"
        if late and not any(s.rank in late for s in suspects):
            named += f"; {len(late)} rank(s) beat during the stall but answered late, not suspects: {late[:8]}"
        say(self.rank, [f"hang at step {record['step']}: {named}; {where}; exiting {EXIT_HANG}"])

    def _alive_after(self, stalled: float, began: float, now: float) -> float | None:
        """Epoch seconds halfway through the stall (`heartbeat.late_ranks`): a rank that beat after it was alive
        while the others waited. Only for a stall between steps, whose clock starts at the last step, as a
        stopped rank stops the others' next collective; a start-up or a long phase's clock starts with the phase."""
        if self.phase != "step":
            return None
        declared_at = now - (time.monotonic() - began)
        return declared_at - stalled / 2

    def _dump_flight_recorder(self) -> str | None:
        """The collectives' flight recorder of this rank (`TORCH_FR_BUFFER_SIZE`, which the launcher
        sets) as the pickle `fr_trace` reads, at `$TORCH_FR_DUMP_TEMP_FILE<rank>` or the output folder."""
        try:
            import torch._C._distributed_c10d as c10d

            prefix = os.environ.get("TORCH_FR_DUMP_TEMP_FILE") or str(
                self.output_dir / records.FLIGHT_RECORDER / "rank_"
            )
            nccl = getattr(c10d, "_dump_nccl_trace", None) if self.backend == "nccl" else None
            data = (nccl or c10d._dump_fr_trace)(True, True, False)  # type: ignore[attr-defined]
            path = Path(f"{prefix}{self.rank}")
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(data)
            return str(path.parent)
        except Exception as exc:  # a diagnosis aid: its failure must not stop the hang report
            say(self.rank, [f"flight recorder not dumped: {type(exc).__name__}: {exc}"])
            return None

"""A `command:` job's hang rule (`hang:` in the job), judged by the launcher from its workers' output.

The shape is SageMaker HyperPod's log monitoring (HyperPodPyTorchJob `logMonitoringConfiguration`,
docs.aws.amazon.com/sagemaker/latest/dg/sagemaker-eks-operator-usage.html): its
`JobHangingDetection` rule has a `logPattern` that must recur within
`expectedRecurringFrequencyInSeconds`, the first match within `expectedStartCutOffInSeconds`. Here
`--hang-quiet-for` is the recurring frequency, `--hang-progress` the pattern (any line when unset)
and `--hang-start-within` the start cut-off.

What the launcher sees: the lines its own node's workers print, when, and each worker's process
state in /proc. What it cannot see: other nodes' output (every node's launcher judges only its own
workers, from their first progress line on, or from the start when `start_within` is set: set it
only when every node's workers print progress lines); whether a quiet program computes or waits (a
stretch without output longer than `quiet_for`, such as a long evaluation, reads as a hang); and
which rank or node stalled a collective its workers wait in. It names as suspects only workers it
finds stopped (state T); otherwise the record lists the quiet ranks and blames no node.

On a hang it writes the workers' Python stacks into the log (SIGABRT: the launcher starts workers
with PYTHONFAULTHANDLER=1, whose handler dumps every thread before the process dies; core dumps are
off), then `failure.json` in `TRAINER_OUTPUT_DIR`, and the launcher exits EXIT_HANG.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import sys
import threading
import time
from pathlib import Path

from .. import records
from ..exit_codes import EXIT_HANG
from ..heartbeat import node_name


def environ_of(pid: int) -> dict[str, str]:
    """A process's environment as it was exec'd ({} once it is gone or not ours to read)."""
    try:
        raw = Path(f"/proc/{pid}/environ").read_bytes()
    except OSError:
        return {}
    return dict(item.decode(errors="replace").partition("=")[::2] for item in raw.split(b"\0") if b"=" in item)


def worker_pids() -> dict[int, int]:
    """rank -> pid of this process's torchrun workers (its children with RANK and LOCAL_RANK)."""
    children: set[int] = set()
    for task in Path("/proc/self/task").iterdir():
        with contextlib.suppress(OSError):
            children |= {int(p) for p in (task / "children").read_text().split()}
    found = {}
    for pid in children:
        env = environ_of(pid)
        if "LOCAL_RANK" in env and env.get("RANK", "").isdigit():
            found[int(env["RANK"])] = pid
    return found


def process_state(pid: int) -> str:
    """The one-letter state of /proc/PID/stat (R, S, D, T, Z...), or "gone"."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return "gone"


class QuietWatch:
    """The launcher's `Lines` watcher for a `hang:` rule; `declared` tells the launcher the attempt
    ended in a hang."""

    def __init__(self, quiet_for: float, progress: str | None, start_within: float | None,
                 output_dir: str | None, say: object) -> None:  # fmt: skip
        self.quiet_for, self.start_within = quiet_for, start_within
        self.progress = re.compile(progress) if progress else None
        self.output_dir = Path(output_dir) if output_dir else None
        self.say = say
        self.lock = threading.Lock()
        self.last: dict[int, tuple[float, str]] = {}
        self.started = time.monotonic()
        self.declared = False
        self.reported = threading.Event()  # set once a declared hang's record is written
        self.thread = threading.Thread(target=self._watch, name="hang-quiet-watch", daemon=True)

    def attempt(self, ranks: list[int]) -> None:
        with self.lock:
            self.last, self.started, self.declared = {}, time.monotonic(), False
            self.reported.clear()
        if not self.thread.is_alive():
            self.thread.start()

    def line(self, rank: int, text: str) -> None:
        if self.progress is None or self.progress.search(text):
            with self.lock:
                self.last[rank] = (time.monotonic(), text[:300])

    def overdue(self, now: float) -> float | None:
        """Seconds past the rule, or None while the rule holds."""
        with self.lock:
            if self.declared:
                return None
            if self.last:
                quiet = now - max(t for t, _ in self.last.values())
                return quiet if quiet > self.quiet_for else None
            if self.start_within is not None and now - self.started > self.start_within:
                return now - self.started
        return None

    def _watch(self) -> None:
        while True:
            quiet = self.overdue(time.monotonic())
            if quiet is not None:
                self.declare(quiet)
            time.sleep(1.0)

    def declare(self, quiet: float) -> None:
        with self.lock:
            self.declared = True
            last = dict(self.last)
        what = f"line matching {self.progress.pattern!r}" if self.progress else "output line"
        rule = f"hang.quiet_for {self.quiet_for:g} s" if last else f"hang.start_within {self.start_within:g} s"
        now, node = time.monotonic(), node_name()
        pids = worker_pids()
        states = {rank: process_state(pid) for rank, pid in pids.items()}
        ranks = [{"rank": r, "node": node, "pid": pids.get(r), "state": states.get(r),
                  "last_progress_age_s": round(now - last[r][0], 1) if r in last else None,
                  "last_progress": last[r][1] if r in last else None} for r in sorted(set(pids) | set(last))]  # fmt: skip
        suspects = [{"node": node, "rank": r, "heartbeat_age_s": None, "why": "its process is stopped (state T)"}
                    for r, s in sorted(states.items()) if s == "T"]  # fmt: skip
        newest = max(last.items(), key=lambda kv: kv[1][0]) if last else None
        seen = f"; last: rank {newest[0]} {newest[1][1]!r}" if newest else "; none seen yet"
        self.say(f"hang: no {what} from this node's workers for {quiet:.0f} s ({rule}){seen}; "  # type: ignore[operator]
                 "dumping their Python stacks (SIGABRT, faulthandler) and stopping them")  # fmt: skip
        for rank, pid in sorted(pids.items()):
            if states[rank] != "T":
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGABRT)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and any(process_state(p) not in ("gone", "Z", "T") for p in pids.values()):
            time.sleep(0.1)
        record = {"kind": "hang", "source": "launcher", **records.stamp(), "exit_code": EXIT_HANG, "node": node,
                  "step": None, "quiet_s": round(quiet, 1), "quiet_for_s": self.quiet_for,
                  "start_within_s": self.start_within, "progress": self.progress.pattern if self.progress else None,
                  "suspects": suspects, "ranks": ranks,
                  "sees": "this node's workers only: their output lines and process states"}  # fmt: skip
        records.write_failure(self.output_dir, record)
        sys.stderr.flush()
        self.reported.set()

    def settle(self, timeout: float = 20.0) -> None:
        """After a declared hang, wait for its record: torchrun returns as soon as the aborted workers are
        gone, and a launcher that exits then kills this (daemon) thread before it writes failure.json."""
        if self.declared:
            self.reported.wait(timeout)

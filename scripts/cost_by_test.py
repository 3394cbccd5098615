"""Which tests use the suite's CPU: the kernel's process accounting joined with pytest's per-test log.

    touch /tmp/acct && accton /tmp/acct
    TRAINCTL_TEST_COST_LOG=/tmp/cost.jsonl bash scripts/test.sh
    accton off
    python3 scripts/cost_by_test.py /tmp/acct /tmp/cost.jsonl [--top 40]

Each process that exited while accounting was on is charged to one test: the test its pytest worker was running
when the process started, found by walking its parents up to the worker (tests/support/suite_cost.py logs each
phase's worker pid and times). A process whose parents end before a worker (one that detached: a local run's
supervisor, a daemon's child) goes to no test, listed by command name; except SLURM's job steps, whose parents end
at slurmd: they go to the one test running at their start whose node id names slurm. Not a
test: a summary for whoever shortens the suite (dump-acct comes with Debian's `acct`)."""

from __future__ import annotations

import argparse
import bisect
import collections
import json
import subprocess
import time
from dataclasses import dataclass


@dataclass(frozen=True)
class Proc:
    pid: int
    ppid: int
    comm: str
    cpu_s: float
    start: float
    end: float


@dataclass(frozen=True)
class Phase:
    nodeid: str
    start: float
    stop: float
    pid: int


def read_acct(path: str) -> list[Proc]:
    """dump-acct's lines: comm|version|utime|stime|etime|uid|gid|mem|io|pid|ppid|flags|exit|tty|start, the times
    in hundredths of a second and the start in local time to the second."""
    out = subprocess.run(["dump-acct", path], capture_output=True, text=True, check=True).stdout
    procs = []
    for line in out.splitlines():
        f = [x.strip() for x in line.split("|")]
        start = time.mktime(time.strptime(f[-1], "%a %b %d %H:%M:%S %Y"))
        elapsed = float(f[4]) / 100
        procs.append(Proc(int(f[9]), int(f[10]), f[0], (float(f[2]) + float(f[3])) / 100, start, start + elapsed))
    return procs


def read_phases(path: str) -> list[Phase]:
    with open(path) as f:
        rows = [json.loads(line) for line in f if line.strip()]
    return [Phase(r["nodeid"].split("[")[0], r["start"], r["stop"], r["pid"]) for r in rows if r.get("pid")]


class Charger:
    """Finds, for a process, the test it belongs to."""

    def __init__(self, procs: list[Proc], phases: list[Phase]) -> None:
        self.by_pid: dict[int, list[Proc]] = collections.defaultdict(list)
        for p in procs:
            self.by_pid[p.pid].append(p)
        self.workers: dict[int, list[Phase]] = collections.defaultdict(list)
        for ph in sorted(phases, key=lambda ph: ph.start):
            self.workers[ph.pid].append(ph)
        self.starts = {pid: [ph.start for ph in phs] for pid, phs in self.workers.items()}
        self.phases = sorted(phases, key=lambda ph: ph.start)

    def _parent(self, proc: Proc) -> Proc | None:
        """The parent's record alive when `proc` started (pids are reused over a long run)."""
        found = [p for p in self.by_pid.get(proc.ppid, []) if p.start - 1 <= proc.start <= p.end + 1]
        return found[0] if found else None

    def _test_of_worker(self, worker: int, at: float) -> str | None:
        i = bisect.bisect_right(self.starts[worker], at + 1) - 1  # the start is to the second
        return self.workers[worker][i].nodeid if i >= 0 else None

    def test_of(self, proc: Proc) -> str | None:
        kind = proc.comm
        seen = 0
        current: Proc | None = proc
        while current is not None and seen < 64:
            if current.ppid in self.workers:
                return self._test_of_worker(current.ppid, proc.start)
            kind = f"{current.comm} {kind}"
            current, seen = self._parent(current), seen + 1
        if "slurm" in kind:  # a job step under slurmd: the SLURM cluster's tests run one at a time
            named = {
                ph.nodeid for ph in self.phases if ph.start - 1 <= proc.start <= ph.stop + 1 and "slurm" in ph.nodeid
            }
            if len(named) == 1:
                return named.pop()
        return None


def largest(sums: dict[str, float]) -> list[tuple[str, float]]:
    return sorted(sums.items(), key=lambda kv: -kv[1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("acct")
    parser.add_argument("log")
    parser.add_argument("--top", type=int, default=40)
    args = parser.parse_args()
    procs, phases = read_acct(args.acct), read_phases(args.log)
    charger = Charger(procs, phases)
    workers = set(charger.workers)
    cpu: dict[str, float] = collections.defaultdict(float)
    count: dict[str, int] = collections.defaultdict(int)
    orphans: dict[str, float] = collections.defaultdict(float)
    for proc in procs:
        if proc.pid in workers:
            continue
        test = charger.test_of(proc)
        if test is None:
            orphans[proc.comm] += proc.cpu_s
            continue
        cpu[test] += proc.cpu_s
        count[test] += 1
    total = sum(p.cpu_s for p in procs)
    own = sum(p.cpu_s for p in procs if p.pid in workers)
    print(f"{total:.0f} CPU-s in {len(procs)} processes; the pytest workers' own {own:.0f}; "
          f"charged to tests {sum(cpu.values()):.0f}; to none {sum(orphans.values()):.0f}")  # fmt: skip
    print(f"\n{'cpu_s':>8} {'procs':>6}  test")
    for test, seconds in largest(cpu)[: args.top]:
        print(f"{seconds:8.1f} {count[test]:6d}  {test}")
    folders: dict[str, float] = collections.defaultdict(float)
    for test, seconds in cpu.items():
        folders["/".join(test.split("::")[0].split("/")[:2])] += seconds
    print(f"\n{'cpu_s':>8}  folder")
    for folder, seconds in largest(folders):
        print(f"{seconds:8.1f}  {folder}")
    print(f"\n{'cpu_s':>8}  charged to no test, by command")
    for comm, seconds in largest(orphans)[:12]:
        print(f"{seconds:8.1f}  {comm}")


if __name__ == "__main__":
    main()

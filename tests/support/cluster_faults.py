"""Faults for the nodes of the --netns test cluster (scripts/slurm-cluster.sh --netns), for fault tests.

Reached through the `cluster_faults` fixture (tests/conftest.py), which heals what a test left behind.
tests/slurm/test_netns_faults.py checks that each one does what it says, by measuring its effect.

- `partition(node)`: iptables DROP of every packet into and out of the node's namespace but loopback
  (or only to and from `peers`' addresses); `heal_partition(node)` flushes those chains again.
- `slow_link(node, mbit)`: a `tbf` qdisc on both ends of the node's veth, so traffic to and from the node
  is capped at that rate (netem is not in this kernel); `clear_link(node)`.
- `cpu_quota(node, fraction)`: a cgroup v1 CFS quota (fraction of one CPU) on the node's `cpu` group,
  where the script started its slurmd, so every job step on the node shares it; `clear_quota(node)`.
- `stop_rank(node, rank)`: SIGSTOP of a torchrun worker (and its children) on the node; `cont(pids)`.
- `kill_node(node)`: its link taken down, then SIGKILL of its slurmd and every process in its namespace:
  a host that lost power (no FIN or RST reaches its peers; its address stops answering). Not healed:
  the cluster fixture sees the node DOWN and starts a fresh cluster for the next test that asks for one.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from pathlib import Path

from slurm_cluster import Cluster
from trainer.launcher.quiet import environ_of as env_of  # a process's environment, as the launcher reads its workers'

CGROUP = Path("/sys/fs/cgroup/cpu/trainctl-slurm")  # scripts/slurm-cluster.sh --netns: one group per node
CFS_PERIOD_US = 10_000  # 10 ms: a slow node is slow at every step (100 ms periods throttled it in bursts)


def _run(argv: list[str]) -> None:
    done = subprocess.run(argv, capture_output=True, text=True, timeout=60)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)} exited {done.returncode}: {done.stderr.strip()}")


class Faults:
    """Faults of one --netns cluster's nodes, remembered so that `heal` undoes them."""

    def __init__(self, cluster: Cluster) -> None:
        if not cluster.addresses:
            raise ValueError("cluster faults need the --netns cluster (the netns_cluster fixture)")
        self.cluster = cluster
        self.stopped: set[int] = set()
        self.dead: set[str] = set()

    def _in(self, node: str, argv: list[str]) -> None:
        _run(["ip", "netns", "exec", self.cluster.namespace(node), *argv])

    def pids(self, node: str) -> list[int]:
        """Every process in the node's network namespace: its slurmd, slurmstepds and job processes."""
        out = subprocess.run(
            ["ip", "netns", "pids", self.cluster.namespace(node)], capture_output=True, text=True, timeout=30
        ).stdout
        return [int(p) for p in out.split()]

    # a partition
    def partition(self, node: str, peers: list[str] | None = None) -> None:
        """DROP what enters or leaves the node (but loopback); with `peers`, only to and from those nodes."""
        if peers is None:
            self._in(node, ["iptables", "-A", "INPUT", "!", "-i", "lo", "-j", "DROP"])
            self._in(node, ["iptables", "-A", "OUTPUT", "!", "-o", "lo", "-j", "DROP"])
            return
        for peer in peers:
            address = self.cluster.addresses[peer]
            self._in(node, ["iptables", "-A", "INPUT", "-s", address, "-j", "DROP"])
            self._in(node, ["iptables", "-A", "OUTPUT", "-d", address, "-j", "DROP"])

    def heal_partition(self, node: str) -> None:
        """The namespace's filter table is this tool's alone: flushing it removes every DROP it added."""
        self._in(node, ["iptables", "-F", "INPUT"])
        self._in(node, ["iptables", "-F", "OUTPUT"])

    # a slow link
    def slow_link(self, node: str, mbit: float) -> None:
        """tbf on the bridge's end of the veth (what the node receives) and on eth0 inside (what it sends)."""
        rate_bytes = mbit * 1e6 / 8
        burst = max(16_000, int(rate_bytes * 0.004))  # 4 ms at the rate, at least ten full frames
        tbf = ["root", "tbf", "rate", f"{mbit}mbit", "burst", str(burst), "latency", "50ms"]
        _run(["tc", "qdisc", "replace", "dev", f"tcl-{node}", *tbf])
        self._in(node, ["tc", "qdisc", "replace", "dev", "eth0", *tbf])

    def clear_link(self, node: str) -> None:
        for argv in (["tc"], ["ip", "netns", "exec", self.cluster.namespace(node), "tc"]):
            dev = f"tcl-{node}" if len(argv) == 1 else "eth0"
            shown = subprocess.run([*argv, "qdisc", "show", "dev", dev], capture_output=True, text=True).stdout
            if "tbf" in shown:
                _run([*argv, "qdisc", "del", "dev", dev, "root"])

    # a slow node
    def cpu_quota(self, node: str, fraction: float) -> None:
        """At most `fraction` of one CPU for all of the node's processes together (slurmd and job steps)."""
        group = CGROUP / node
        (group / "cpu.cfs_period_us").write_text(str(CFS_PERIOD_US))
        (group / "cpu.cfs_quota_us").write_text(str(max(1000, int(fraction * CFS_PERIOD_US))))

    def clear_quota(self, node: str) -> None:
        (CGROUP / node / "cpu.cfs_quota_us").write_text("-1")

    def throttled(self, node: str) -> int:
        """How many CFS periods the node's group was throttled in (cpu.stat nr_throttled)."""
        stat = dict(line.split() for line in (CGROUP / node / "cpu.stat").read_text().splitlines())
        return int(stat["nr_throttled"])

    # a stopped process
    def rank_pids(self, node: str, rank: int, job_id: str | None = None) -> list[int]:
        """The torchrun worker of global `rank` on the node (LOCAL_RANK marks a worker), with its children."""
        found = []
        for pid in self.pids(node):
            env = env_of(pid)
            if env.get("RANK") == str(rank) and "LOCAL_RANK" in env and job_id in (None, env.get("SLURM_JOB_ID")):
                found.append(pid)
        return found

    def stop_rank(self, node: str, rank: int, job_id: str | None = None) -> list[int]:
        pids = self.rank_pids(node, rank, job_id)
        if not pids:
            raise LookupError(f"no process of rank {rank} on {node}" + (f" in job {job_id}" if job_id else ""))
        for pid in pids:
            os.kill(pid, signal.SIGSTOP)
        self.stopped.update(pids)
        return pids

    def cont(self, pids: list[int] | set[int]) -> None:
        for pid in list(pids):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGCONT)
            self.stopped.discard(pid)

    # a dead node
    def kill_node(self, node: str) -> list[int]:
        """A host that lost power: its link goes down first (so no FIN or RST reaches a peer), then SIGKILL
        of its slurmd (nothing may report or restart) and of everything else in its namespace until
        none is left."""
        _run(["ip", "link", "set", f"tcl-{node}", "down"])
        self.dead.add(node)
        killed: list[int] = []
        with contextlib.suppress(OSError, ValueError):
            slurmd = self.cluster.slurmd_pid(node)
            os.kill(slurmd, signal.SIGKILL)
            killed.append(slurmd)
        deadline = time.monotonic() + 10
        while left := self.pids(node):  # a process that has exited is no longer in the namespace
            if time.monotonic() > deadline:
                raise RuntimeError(f"processes of {node} survived SIGKILL: {left}")
            for pid in left:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
                killed.append(pid)
            time.sleep(0.05)
        return sorted(set(killed))

    def heal(self) -> None:
        """Undo every fault on every live node (whoever added it): stopped ranks go on, no DROP, no tbf,
        no quota. A killed node stays dead."""
        self.cont(set(self.stopped))
        for node in self.cluster.nodes:
            if node in self.dead:
                continue
            self.heal_partition(node)
            self.clear_link(node)
            self.clear_quota(node)

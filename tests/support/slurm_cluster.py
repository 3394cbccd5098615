"""The SLURM test cluster of a pytest session (scripts/slurm-cluster.sh), in either of its shapes.

One cluster can exist on this machine at a time (fixed ports, /etc/slurm, /etc/hosts), so a session has
one `SlurmClusters`, reached through the `slurm_clusters` fixture (tests/conftest.py, which holds
`slurm_cluster_lock` while it lives): `ensure(shape)` returns the cluster in that shape, restarting it
only when the shape differs or a node is down (a fault test may have killed one), and the cluster is
stopped when the session ends. The plain shape runs every virtual node on 127.0.0.1; the `--netns` shape
makes each node a host of its own (namespaces, bridge, addresses: the script's header).
"""

from __future__ import annotations

import ipaddress
import os
import re
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
START = REPO / "scripts" / "slurm-cluster.sh"
STOP = REPO / "scripts" / "slurm-cluster-stop.sh"
SUBNET = "10.201.24"  # scripts/slurm-cluster.sh --netns: the bridge is .1, node nI is .(10+I)
MASTER_LINE = re.compile(r"trainctl: job \d+ \(restart \d+\) on (\S+), master (\S+):(\d+)")


class ClusterUnavailable(RuntimeError):
    """The cluster script could not bring the cluster up (not root, no packages, a failed start)."""


@dataclass(frozen=True)
class Shape:
    nodes: int
    cpus_per_node: int
    netns: bool = False

    def argv(self) -> list[str]:
        return [*(["--netns"] if self.netns else []), str(self.nodes), str(self.cpus_per_node)]


PLAIN = Shape(nodes=2, cpus_per_node=4)  # tests/slurm, tests/reliability: n1, n2 both on 127.0.0.1
NETNS = Shape(nodes=3, cpus_per_node=4, netns=True)  # netns_cluster: n1..n3, hosts to each other


@dataclass(frozen=True)
class Master:
    """Where a SLURM job's ranks met, as its script echoed it (`master $MASTER_ADDR:$MASTER_PORT`)."""

    nodelist: str
    name: str
    port: int
    address: str  # what `name` resolves to here (the nodes share /etc/hosts)

    @property
    def loopback(self) -> bool:
        return ipaddress.ip_address(self.address).is_loopback


@dataclass(frozen=True)
class Cluster:
    nodes: list[str]
    cpus_per_node: int
    python_env: str
    """The venv running the tests: its bin/ has trainer-launch (CI's is <clone>/.venv)."""
    addresses: dict[str, str] = field(default_factory=dict)
    """--netns: node -> its address on the bridge; empty in the plain shape, where every node is 127.0.0.1."""

    def namespace(self, node: str) -> str:
        return f"trainctl-{node}"

    def on_node(self, node: str, argv: list[str], **kwargs: Any) -> subprocess.CompletedProcess[Any]:
        """Run argv inside the node's network namespace (the network as a process of that host sees it)."""
        return subprocess.run(["ip", "netns", "exec", self.namespace(node), *argv], **kwargs)

    def popen_on(self, node: str, argv: list[str], **kwargs: Any) -> subprocess.Popen[Any]:
        return subprocess.Popen(["ip", "netns", "exec", self.namespace(node), *argv], **kwargs)

    def addresses_on(self, node: str) -> set[str]:
        """The IPv4 addresses configured inside the node's namespace (read there, not from /etc/hosts)."""
        out = subprocess.run(
            ["ip", "-n", self.namespace(node), "-4", "-o", "addr", "show"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        return set(re.findall(r"inet (\S+)/", out))

    def slurmd_pid(self, node: str) -> int:
        return int(Path(f"/run/slurmd-{node}.pid").read_text().strip())

    @contextmanager
    def watch_connections(self, every: float = 0.2) -> Iterator[set[tuple[str, str, str]]]:
        """Sample each node's established TCP connections while the block runs, from the node's own table
        (/proc/<its slurmd>/net/tcp): yields the set of (node, local addr:port, peer addr:port) seen."""
        seen: set[tuple[str, str, str]] = set()
        tables = {node: Path(f"/proc/{self.slurmd_pid(node)}/net/tcp") for node in self.nodes}
        done = threading.Event()

        def sample() -> None:
            while not done.is_set():
                for node, table in tables.items():
                    seen.update((node, local, peer) for local, peer in established(table))
                done.wait(every)

        thread = threading.Thread(target=sample, daemon=True)
        thread.start()
        try:
            yield seen
        finally:
            done.set()
            thread.join()


def established(table: Path) -> list[tuple[str, str]]:
    """(local, peer) of every ESTABLISHED IPv4 TCP socket in a /proc/<pid>/net/tcp table."""
    try:
        lines = table.read_text().splitlines()[1:]
    except OSError:
        return []
    out = []
    for line in lines:
        fields = line.split()
        if len(fields) > 3 and fields[3] == "01":  # TCP_ESTABLISHED
            out.append((_endpoint(fields[1]), _endpoint(fields[2])))
    return out


def _endpoint(hex_endpoint: str) -> str:
    addr, port = hex_endpoint.split(":")
    return f"{socket.inet_ntoa(int(addr, 16).to_bytes(4, 'little'))}:{int(port, 16)}"


def node_state(node: str) -> set[str]:
    """slurmctld's view of a node: its state and flags, e.g. {"MIXED", "NOT_RESPONDING"} or {"DOWN", ...}
    (`scontrol show node`, whose State= names each flag; sinfo's short forms hide some behind others)."""
    done = subprocess.run(["scontrol", "-o", "show", "node", node], capture_output=True, text=True, timeout=60)
    found = re.search(r"\bState=(\S+)", done.stdout)
    return set(found.group(1).replace("*", "").split("+")) if found else set()


def master_of(log: str) -> Master:
    """The master the job's ranks used: the script's `master NAME:PORT` line, NAME resolved here."""
    found = MASTER_LINE.findall(log)
    if not found:
        raise AssertionError("no `trainctl: job ... master ADDR:PORT` line in the log:\n" + log[-3000:])
    nodelist, name, port = found[-1]
    return Master(nodelist=nodelist, name=name, port=int(port), address=socket.gethostbyname(name))


class SlurmClusters:
    """The session's one SLURM test cluster, started in the shape a test asks for."""

    def __init__(self) -> None:
        self.shape: Shape | None = None
        self.startups: list[tuple[Shape, float]] = []

    def up(self, shape: Shape) -> Cluster:
        """`ensure` for a test: in CI (`CI=true`) a cluster that cannot start fails the test; elsewhere the
        test skips and says why (no root, no packages)."""
        import pytest

        try:
            if os.geteuid() != 0:
                raise ClusterUnavailable("scripts/slurm-cluster.sh needs root (it installs packages, starts daemons)")
            return self.ensure(shape)
        except ClusterUnavailable as exc:
            if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
                pytest.fail(f"SLURM test cluster unavailable in CI: {exc}", pytrace=False)
            pytest.skip(f"SLURM test cluster unavailable: {exc}")

    def ensure(self, shape: Shape) -> Cluster:
        if self.shape != shape or not self.healthy(shape):
            self.start(shape)
        names = [f"n{i}" for i in range(1, shape.nodes + 1)] if shape.nodes > 1 else [socket.gethostname()]
        addresses = {n: f"{SUBNET}.{10 + i}" for i, n in enumerate(names, 1)} if shape.netns else {}
        return Cluster(nodes=names, cpus_per_node=shape.cpus_per_node, python_env=sys.prefix, addresses=addresses)

    def start(self, shape: Shape) -> float:
        self.shape = None
        started = time.monotonic()
        try:
            done = subprocess.run(["bash", str(START), *shape.argv()], capture_output=True, text=True, timeout=600)
        except subprocess.TimeoutExpired as exc:
            raise ClusterUnavailable("scripts/slurm-cluster.sh did not finish within 600 s") from exc
        if done.returncode != 0:
            raise ClusterUnavailable(
                f"scripts/slurm-cluster.sh exited {done.returncode}:\n{done.stdout}\n{done.stderr}"
            )
        seconds = time.monotonic() - started
        self.shape = shape
        self.startups.append((shape, seconds))
        print(f"slurm cluster {' '.join(shape.argv())} up in {seconds:.1f}s", file=sys.stderr)
        return seconds

    def healthy(self, shape: Shape) -> bool:
        """Every node of the shape answers slurmctld and none is down or drained."""
        done = subprocess.run(["sinfo", "-h", "-N", "-o", "%N %t"], capture_output=True, text=True, timeout=60)
        states = dict(line.split() for line in done.stdout.splitlines() if line.strip())
        if done.returncode != 0 or len(states) != shape.nodes:
            return False
        bad = ("down", "drain", "drng", "fail", "maint", "unk", "npc")
        return all(not s.endswith("*") and not s.startswith(bad) for s in states.values())

    def stop(self) -> None:
        if self.shape is not None:
            subprocess.run(["bash", str(STOP)], capture_output=True, timeout=120)
            self.shape = None

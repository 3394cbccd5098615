"""The --netns cluster itself and its fault tools (tests/support/cluster_faults.py), each checked by the effect
it has: every node is a host with its own name and address and no way out of the bridge's /24; a partition
makes connects time out; tbf caps a transfer's rate; a CPU quota caps a job step's CPU share; SIGSTOP of one
rank stalls its peers in the collective; a killed node goes silent and slurmctld marks it DOWN; and the stop
script leaves nothing behind."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import procs  # tests/support (on sys.path through tests/conftest.py)
import pytest
from cluster_faults import CGROUP, Faults
from slurm_cluster import NETNS, SUBNET, Cluster, SlurmClusters, node_state
from trainctl import Job, Run

pytestmark = [pytest.mark.slurm, pytest.mark.slow]
BEAT = Path(__file__).resolve().parents[1] / "support" / "beat.py"
PY = sys.executable
SLURMD_PORT = 6818

CONNECT = """
import errno, socket, sys, time
t = time.monotonic()
try:
    socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=float(sys.argv[3])).close()
    outcome = "connected"
except socket.timeout:
    outcome = "timeout"
except OSError as exc:
    outcome = errno.errorcode.get(exc.errno, str(exc))
print(outcome, round(time.monotonic() - t, 3))
"""
SINK = """
import socket, sys
server = socket.create_server(("0.0.0.0", int(sys.argv[1])))
print("ready", flush=True)
conn, _ = server.accept()
got = 0
while chunk := conn.recv(1 << 16):
    got += len(chunk)
conn.sendall(b"k")
print(got, flush=True)
"""
SEND = """
import socket, sys, time
size = int(sys.argv[3])
conn = socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=60)
t = time.monotonic()
conn.sendall(b"x" * size)
conn.shutdown(socket.SHUT_WR)
assert conn.recv(1) == b"k"
print(round(time.monotonic() - t, 4))
"""
BURN = """
import sys, time
t, c, x = time.monotonic(), time.process_time(), 0
while time.monotonic() - t < float(sys.argv[1]):
    x += 1
print(round((time.process_time() - c) / (time.monotonic() - t), 4))
"""


def connect(
    cluster: Cluster, node: str, address: str, port: int = SLURMD_PORT, timeout: float = 3
) -> tuple[str, float]:
    """From inside `node`: connect to address:port; ("connected" | "timeout" | errno name, seconds)."""
    done = cluster.on_node(node, [PY, "-c", CONNECT, address, str(port), str(timeout)], capture_output=True, text=True)
    outcome, seconds = done.stdout.split()
    return outcome, float(seconds)


def transfer_mbit(cluster: Cluster, src: str, dst: str, size: int, port: int = 45000) -> float:
    """Send `size` bytes from src to dst over TCP (until dst acknowledges all of them): Mbit/s."""
    sink = cluster.popen_on(dst, [PY, "-c", SINK, str(port)], stdout=subprocess.PIPE, text=True)
    try:
        assert sink.stdout is not None and sink.stdout.readline().strip() == "ready"
        done = cluster.on_node(src, [PY, "-c", SEND, cluster.addresses[dst], str(port), str(size)],
                               capture_output=True, text=True, timeout=120)  # fmt: skip
        assert done.returncode == 0, done.stderr
        assert int(sink.stdout.readline()) == size
        return size * 8 / float(done.stdout) / 1e6
    finally:
        sink.kill()
        sink.wait()


def cpu_share(node: str, seconds: float = 3) -> float:
    """A CPU-bound loop run as a job step on `node` (srun): its CPU time over its wall time."""
    argv = ["srun", "--quiet", "-N1", "-n1", f"--nodelist={node}", PY, "-c", BURN, str(seconds)]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return float(done.stdout)


def test_each_node_is_a_host_with_no_way_out(netns_cluster: Cluster) -> None:
    probe = "import socket; h = socket.gethostname(); print(h, socket.gethostbyname(h))"
    argv = ["srun", "--nodes=3", "--ntasks-per-node=1", PY, "-c", probe]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert dict(line.split() for line in done.stdout.splitlines()) == netns_cluster.addresses
    for node, address in netns_cluster.addresses.items():
        assert netns_cluster.addresses_on(node) == {"127.0.0.1", address}
        routes = subprocess.run(["ip", "-n", netns_cluster.namespace(node), "route"], capture_output=True, text=True)
        assert routes.stdout.split()[:3] == [f"{SUBNET}.0/24", "dev", "eth0"] and "default" not in routes.stdout
    assert connect(netns_cluster, "n1", "192.0.2.1", 80)[0] == "ENETUNREACH"  # nothing leaves the bridge's /24
    assert connect(netns_cluster, "n1", netns_cluster.addresses["n3"])[0] == "connected"  # n3's slurmd


def test_partition_drops_a_nodes_traffic_until_healed(netns_cluster: Cluster, cluster_faults: Faults) -> None:
    ip = netns_cluster.addresses
    before = connect(netns_cluster, "n1", ip["n2"])
    assert before[0] == "connected", before
    cluster_faults.partition("n2")
    cut = {
        "n1->n2": connect(netns_cluster, "n1", ip["n2"]),
        "n2->n1": connect(netns_cluster, "n2", ip["n1"]),
        "n2->slurmctld": connect(netns_cluster, "n2", f"{SUBNET}.1", 6817),
    }
    assert all(outcome == "timeout" and seconds >= 2.9 for outcome, seconds in cut.values()), cut
    assert connect(netns_cluster, "n1", ip["n3"])[0] == "connected"  # the others still talk
    assert connect(netns_cluster, "n2", "127.0.0.1")[0] == "connected"  # and n2 to itself
    cluster_faults.heal_partition("n2")
    after = connect(netns_cluster, "n1", ip["n2"])
    assert after[0] == "connected", after
    print(f"partition of n2: before {before}, cut {cut}, healed {after}")


def test_slow_link_caps_a_transfer_at_the_tbf_rate(netns_cluster: Cluster, cluster_faults: Faults) -> None:
    rate = 16.0  # Mbit/s: 2 MB/s
    size = 4_000_000
    free = transfer_mbit(netns_cluster, "n1", "n2", size)
    cluster_faults.slow_link("n2", rate)
    into = transfer_mbit(netns_cluster, "n1", "n2", size)
    out_of = transfer_mbit(netns_cluster, "n2", "n3", size)
    untouched = transfer_mbit(netns_cluster, "n1", "n3", size)
    cluster_faults.clear_link("n2")
    print(f"tbf {rate} Mbit/s on n2: into {into:.1f}, out of {out_of:.1f}; free {free:.0f}, n1->n3 {untouched:.0f}")
    assert 0.6 * rate <= into <= 1.1 * rate and 0.6 * rate <= out_of <= 1.1 * rate, (into, out_of)
    assert free > 4 * rate and untouched > 4 * rate, (free, untouched)


def test_cpu_quota_caps_the_job_steps_on_a_node(netns_cluster: Cluster, cluster_faults: Faults) -> None:
    quota = 0.2
    free = cpu_share("n1")
    throttled = cluster_faults.throttled("n2")
    cluster_faults.cpu_quota("n2", quota)
    slowed = cpu_share("n2")
    periods = cluster_faults.throttled("n2") - throttled
    cluster_faults.clear_quota("n2")
    print(f"cpu quota {quota} on n2: a job step's CPU share {slowed:.3f} (n1, no quota: {free:.3f}); "
          f"throttled in {periods} periods")  # fmt: skip
    assert 0.5 * quota <= slowed <= 1.2 * quota, slowed
    # the quota, not the machine's load, held it there: CFS throttled the group, and the same loop on a
    # node without a quota got more (how much more depends on what else runs on the 2 cores)
    assert periods >= 10 and free > 1.2 * quota, (periods, free)


def _beat_job(tmp_path: Path) -> tuple[Run, Path]:
    out = tmp_path / "beats"
    job = Job.parse({"name": "beat", "command": ["python", str(BEAT), str(out)],
                     "resources": {"nodes": 2, "procs_per_node": 1},
                     "slurm": {"python_env": sys.prefix, "workdir": str(tmp_path / "w")}})  # fmt: skip
    return job.submit("slurm"), out


def _beats(out: Path) -> dict[int, int]:
    found = {}
    for path in out.glob("beat-*"):
        text = path.read_text().split()
        if text:
            found[int(path.name.removeprefix("beat-"))] = int(text[0])
    return found


def _wait_beats(run: Run, out: Path, at_least: int, timeout: float = 180) -> dict[int, int]:
    deadline = time.monotonic() + timeout
    while len(b := _beats(out)) < 2 or min(b.values()) < at_least:
        assert time.monotonic() < deadline, f"beats {b} after {timeout}s:\n" + "\n".join(run.logs())[-3000:]
        assert not run.status().state.finished, "\n".join(run.logs())[-3000:]
        time.sleep(0.1)
    return b


@contextmanager
def _beating(faults: Faults, tmp_path: Path, at_least: int) -> Iterator[tuple[Run, Path, str]]:
    """The heartbeat job on 2 nodes once both ranks made `at_least` steps, and the node of rank 1; cancelled
    at the end unless it finished, so a failed check leaves no job behind for the next test."""
    run, out = _beat_job(tmp_path)
    try:
        _wait_beats(run, out, at_least)
        yield run, out, next(n for n in faults.cluster.nodes if faults.rank_pids(n, 1, run.native_id))
    finally:
        if not run.status().state.finished:
            run.cancel()


def test_stopped_rank_stalls_its_peer_until_continued(
    netns_cluster: Cluster, cluster_faults: Faults, tmp_path: Path, home: Path
) -> None:
    with _beating(cluster_faults, tmp_path, 20) as (run, out, node):
        pids = cluster_faults.stop_rank(node, 1, run.native_id)
        deadline = time.monotonic() + 10  # a signal takes effect when the process next runs
        while not all(procs.stopped(p) for p in pids):
            assert time.monotonic() < deadline, {p: procs.state(p) for p in pids}
            time.sleep(0.05)
        time.sleep(0.5)  # the step in flight completes on neither side
        stalled = _beats(out)
        time.sleep(3)
        still = _beats(out)
        cluster_faults.cont(pids)
        resumed = _wait_beats(run, out, max(still.values()) + 20, timeout=30)
        (out / "done").touch()
        final = run.wait(timeout=120, poll=0.5)
    print(f"SIGSTOP rank 1 on {node} ({len(pids)} pid(s)): beats {stalled} -> {still} in 3 s; continued: {resumed}")
    assert still == stalled, (stalled, still)
    assert final.state.value == "succeeded", "\n".join(run.logs())[-3000:]


@pytest.mark.long  # a dead node: tests/slurm/test_netns_retries.py
def test_killed_node_goes_silent_and_slurm_marks_it_down(
    netns_cluster: Cluster, cluster_faults: Faults, tmp_path: Path, home: Path
) -> None:
    with _beating(cluster_faults, tmp_path, 10) as (run, _, node):
        other = next(n for n in netns_cluster.nodes if n != node)
        killed = cluster_faults.kill_node(node)
        t0 = time.monotonic()
        assert cluster_faults.pids(node) == [] and len(killed) >= 3  # slurmd, slurmstepd, launcher, worker...
        reach = connect(netns_cluster, other, netns_cluster.addresses[node])
        assert reach[0] in ("timeout", "EHOSTUNREACH"), reach  # a dead host: no answer at all, not a refusal
        marks: dict[str, float] = {}
        left = None  # when the job stopped running there: it failed, or SLURM requeued it (JobRequeue=1)
        while time.monotonic() - t0 < 120 and ("down" not in marks or left is None):
            state = node_state(node)
            if "NOT_RESPONDING" in state:
                marks.setdefault("not responding", round(time.monotonic() - t0, 1))
            if "DOWN" in state:
                marks.setdefault("down", round(time.monotonic() - t0, 1))
            status = run.status()
            if left is None and (status.state.finished or status.restarts):
                left = (round(time.monotonic() - t0, 1), status.state.value, status.native_state)
            time.sleep(0.5)
    print(f"killed {node} ({len(killed)} processes): {reach} from {other}; slurmctld {marks}; job {left}")
    assert "down" in marks and marks["down"] <= 60, (marks, node_state(node))
    assert left is not None and left[1] != "succeeded", left


def test_stop_removes_everything_the_netns_mode_made(
    slurm_clusters: SlurmClusters, netns_cluster: Cluster, cluster_faults: Faults
) -> None:
    cluster_faults.partition("n1")
    cluster_faults.slow_link("n2", 8)
    cluster_faults.cpu_quota("n3", 0.5)
    slurm_clusters.stop()
    netns = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    links = subprocess.run(["ip", "-o", "link"], capture_output=True, text=True).stdout
    rules = subprocess.run(["iptables", "-S"], capture_output=True, text=True).stdout
    qdiscs = subprocess.run(["tc", "qdisc", "show"], capture_output=True, text=True).stdout
    assert "trainctl-" not in netns and "tcl-" not in links and "trainctl0" not in links, (netns, links)
    assert "trainctl" not in rules and "tcl-" not in qdiscs and not CGROUP.exists(), rules
    assert "trainctl-slurm-virtual-nodes" not in Path("/etc/hosts").read_text()
    assert subprocess.run(["pgrep", "-x", "slurmd"], capture_output=True).returncode == 1
    started = time.monotonic()
    slurm_clusters.ensure(NETNS)
    print(f"netns cluster (3 hosts) up again in {time.monotonic() - started:.1f}s after a clean stop")

"""Retries by cause on the --netns cluster (3 nodes, each its own host): each retry leaves out every node
blamed so far (ExcNodeList), a job that no longer fits stops naming them, exit 2 is never retried, and
the srun 143 bug stays fixed (one task's failure SIGTERMs the others, whose 143 is no preemption).

Command jobs (`launch: per_node`) play the trainer's part with its contract (docs/contracts.md section 2:
failure.json and verdict.txt in TRAINER_OUTPUT_DIR, exit 200), so these take seconds; the built-in trainer's own hangs
and their retries are in test_netns_hangs.py."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch
from cluster_faults import Faults
from slurm_cluster import Cluster
from trainctl import Job, Run, RunState
from trainctl.errors import EngineError
from trainctl.runs.state import Attempt

# every retry here runs with a python3 on the batch host's PATH that exits 1: the retry lines need no Python
pytestmark = [pytest.mark.slurm, pytest.mark.slow, pytest.mark.usefixtures("no_host_python")]

# rank 1 blames its own node the way the trainer's hang watchdog does and exits 200; rank 0 checkpoints on
# srun's SIGTERM the way the trainer does (exit 143)
BLAME_SELF = """
import json, os, signal, socket, sys, time
signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
node, rank = socket.gethostname(), int(os.environ["NODE_RANK"])
print(f"rank {rank} on {node}", flush=True)
if rank == 1:
    time.sleep(2)
    record = {"kind": "hang", "source": "launcher", "time": time.time(), "exit_code": EXIT,
              "suspects": [{"node": node, "rank": 1, "why": "the test blames it"}]}
    if EXIT == 200:  # the contract (docs/contracts.md section 2): failure.json, and verdict.txt for the batch script
        with open(os.path.join(os.environ["TRAINER_OUTPUT_DIR"], "failure.json"), "w") as fh:
            json.dump(record, fh)
        with open(os.path.join(os.environ["TRAINER_OUTPUT_DIR"], "verdict.txt"), "w") as fh:
            fh.write(f"kind=hang\\nnodes={node}\\n")
    sys.exit(EXIT)
time.sleep(300)
"""


def command_job(work: Path, name: str, exit_code: int, preemption: bool = False, **fields: object) -> Job:
    code = BLAME_SELF.replace("EXIT", str(exit_code))
    return Job.parse({"name": name, "command": [sys.executable, "-c", code], "launch": "per_node",
                      "resources": {"nodes": 2, "procs_per_node": 1}, "max_runtime": "10m",
                      "slurm": {"workdir": str(work), "preemption": preemption}, **fields})  # fmt: skip


def finish(run: Run, release: Callable[[str], None], timeout: float = 300) -> None:
    """Wait for the job to end, starting each requeued attempt at once (not after SLURM's requeue hold)."""
    deadline, released = time.monotonic() + timeout, 0
    while (status := run.status()).state is not RunState.FAILED and status.state is not RunState.SUCCEEDED:
        assert time.monotonic() < deadline, "\n".join(run.logs())[-3000:]
        if status.state is RunState.QUEUED and (status.restarts or 0) > released:
            release(run.native_id)
            released = status.restarts or 0
        time.sleep(1)


def succeeded_without(run: Run, cause: str | tuple[str, ...], node: str) -> tuple[Attempt, str]:
    """The run succeeded in two attempts: the first ended by `cause` (or one of them) blaming `node`, the second
    ran without it. (The second attempt and the job's log.)"""
    status = run.status()
    log = "\n".join(run.logs())
    assert status.state is RunState.SUCCEEDED, log[-4000:]
    first, second = status.attempts
    causes = (cause,) if isinstance(cause, str) else cause
    assert first.cause is not None and first.cause.value in causes and first.blamed_nodes == [node], status.attempts
    ran_on = subprocess.run(["scontrol", "show", "hostnames", second.nodes or ""], capture_output=True, text=True)
    assert node not in ran_on.stdout.split() and second.state is RunState.SUCCEEDED, (status.attempts, log[-3000:])
    return second, log


def test_retry_leaves_out_blamed_nodes_until_the_job_no_longer_fits(
    netns_cluster: Cluster, tmp_path: Path, home: Path, release_requeued: Callable[[str], None]
) -> None:
    run = command_job(tmp_path, "blame", 200, retries=2).submit("slurm")
    finish(run, release_requeued)
    status = run.status()
    log = "\n".join(run.logs())
    attempts = status.attempts
    assert status.state is RunState.FAILED and len(attempts) == 2, log[-3000:]
    first, second = attempts
    assert first.cause is second.cause and first.cause is not None and first.cause.value == "hang", attempts
    (blamed,), (blamed_again,) = first.blamed_nodes, second.blamed_nodes
    ran_on = subprocess.run(["scontrol", "show", "hostnames", second.nodes or ""], capture_output=True, text=True)
    assert blamed not in ran_on.stdout.split() and blamed_again != blamed, (attempts, log[-3000:])
    assert f"once the blamed node(s) {blamed}, {blamed_again} are excluded" in log, log[-3000:]
    assert f"retry 1 of 2, excluding {blamed}: requeueing" in log, log[-3000:]
    assert status.failure is not None and [s.node for s in status.failure.suspects] == [blamed_again], status.failure
    shown = subprocess.run([str(Path(sys.executable).parent / "trainctl"), "status", run.id, "--output", "json"],
                           capture_output=True, text=True, timeout=60)  # fmt: skip
    rows = json.loads(shown.stdout)["attempts"]
    assert [(a["number"], a["cause"], a["exit_code"], a["blamed_nodes"]) for a in rows] == [
        (1, "hang", 200, [blamed]), (2, "hang", 200, [blamed_again])]  # fmt: skip
    assert all(a["engine_id"] == run.native_id and a["started_at"] < a["ended_at"] for a in rows), rows


def test_bad_input_is_never_retried_and_a_killed_peers_143_is_no_preemption(
    netns_cluster: Cluster, tmp_path: Path, home: Path, release_requeued: Callable[[str], None]
) -> None:
    """Rank 1 exits 2; srun's --kill-on-bad-exit SIGTERMs rank 0, which exits 143, and srun exits 143.
    Before causes, the batch script read that as a preemption and, with slurm.preemption, requeued forever."""
    job = command_job(tmp_path, "bad", 2, preemption=True, retries=2)
    run = job.submit("slurm")
    finish(run, release_requeued, timeout=180)
    status = run.status()
    log = "\n".join(run.logs())
    assert status.state is RunState.FAILED and status.restarts == 0, log[-3000:]
    assert [(a.number, a.cause.value if a.cause else None) for a in status.attempts] == [(1, "invalid")], log
    assert "attempt 1 ended: invalid (exit 143); never retried" in log, log[-3000:]


# the partition's one trial is long: its detection and retry are the stopped rank's path (CI), and the tool itself
# is checked in CI by test_netns_faults.test_partition_drops_a_nodes_traffic_until_healed
@pytest.mark.parametrize("fault", ["stop", pytest.param("partition", marks=pytest.mark.long)])
def test_hung_node_retry_runs_without_it_and_ends_bit_identical(
    netns_cluster: Cluster, cluster_faults: Faults, digits_data: Path, tmp_path: Path, home: Path,
    resume_helpers: Any, release_requeued: Callable[[str], None], fault: str,
) -> None:  # fmt: skip
    """Issue 24's done-when a and b, one trial each: after a checkpoint, rank 1's process is SIGSTOPped, or its
    node is cut off (every packet in or out dropped); the hang names that node, the retry runs without it and
    resumes, and the weights equal an uninterrupted run's."""
    whole = Job.parse(resume_helpers.job(digits_data, "whole", 2)).submit("local")
    data = resume_helpers.job(digits_data, "stopped", 1, retries=2,
                              slurm={"workdir": str(tmp_path / "w")})  # fmt: skip
    data["resources"] = {"nodes": 2, "procs_per_node": 1}
    data["trainer"] = {**data["trainer"], "hang_timeout": 10}
    run = Job.parse(data).submit("slurm")
    try:
        ckpts = Path(run.paths.checkpoint_dir)
        deadline = time.monotonic() + 240
        while not list(ckpts.glob("step-*/meta.json")):
            assert time.monotonic() < deadline, "no checkpoint within 240 s:\n" + "\n".join(run.logs())[-3000:]
            time.sleep(0.1)
        node = next(n for n in netns_cluster.nodes if cluster_faults.rank_pids(n, 1, run.native_id))
        if fault == "stop":
            cluster_faults.stop_rank(node, 1, run.native_id)
        else:
            cluster_faults.partition(node)
        finish(run, release_requeued, timeout=400)
    finally:
        cluster_faults.heal()
        if not run.status().state.finished:
            run.cancel()
    # A cut-off node is also one SLURM stops hearing from: when its SlurmdTimeout (20 s here) ends before the
    # batch script has read the trainer's verdict, SLURM requeues the job itself and the attempt reads node_lost
    second, log = succeeded_without(run, "hang" if fault == "stop" else ("hang", "node_lost"), node)
    record = json.loads((Path(run.paths.output_dir or "") / "failure.json").read_text())
    assert record["kind"] == "hang" and [s["node"] for s in record["suspects"]] == [node], record
    detected = record["time"] - max(r["step_at"] for r in record["ranks"] if r["answered"])  # from the last step
    assert detected <= 10 + 30, record  # done-when a: within hang_timeout + 30 s (CI's one trial of the figure)
    print(f"{fault}: the hang named {node} {detected:.1f} s after the last step")
    assert second.resumed_from_step is not None and f"at step {second.resumed_from_step} " in log, log[-3000:]
    assert "[rank0] stacks of rank 0" in log, log[-3000:]  # the live rank's stacks

    assert whole.wait(timeout=300, poll=0.5).state is RunState.SUCCEEDED, "\n".join(whole.logs())
    ours, theirs = (sorted(Path(r.paths.checkpoint_dir).glob("step-*"))[-1] for r in (run, whole))
    assert ours.name == theirs.name
    a = torch.load(ours / "state.pt", map_location="cpu", weights_only=True)["model"]
    b = torch.load(theirs / "state.pt", map_location="cpu", weights_only=True)["model"]
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in b), "weights differ from the whole run"


def test_node_under_a_cpu_quota_is_left_out_with_stragglers_exclude(
    netns_cluster: Cluster, cluster_faults: Faults, digits_data: Path, tmp_path: Path, home: Path,
    release_requeued: Callable[[str], None],
) -> None:  # fmt: skip
    """Issue 24's done-when c: a 5 % CPU quota on rank 1's node once training runs; with `stragglers: exclude`
    the trainer names it, checkpoints and ends the attempt (slow_node), and the retry finishes without it."""
    job = Job.parse({"name": "quota", "resources": {"nodes": 2, "procs_per_node": 1}, "retries": 1,
                     "trainer": {"model": "digits", "batch_size": 32, "epochs": 15, "lr": 0.003, "log_every": 5,
                                 "stragglers": "exclude", "straggler_factor": 3},
                     "data": {"train": str(digits_data / "train.jsonl"), "val": str(digits_data / "val.jsonl")},
                     "checkpoint": {"every_steps": 100},
                     "slurm": {"workdir": str(tmp_path)}})  # fmt: skip
    run = job.submit("slurm")
    try:
        metrics = Path(run.paths.output_dir or "") / "metrics.jsonl"
        deadline = time.monotonic() + 240
        while not (metrics.exists() and metrics.read_text().strip()):
            assert time.monotonic() < deadline, "no training within 240 s:\n" + "\n".join(run.logs())[-3000:]
            time.sleep(0.2)
        node = next(n for n in netns_cluster.nodes if cluster_faults.rank_pids(n, 1, run.native_id))
        # 5 % and a factor of 3, not the figures' 20 % and 2 (test_netns_hangs). A 20 % quota made rank 1 2-3.4x the
        # median, and one window below the factor breaks `exclude`'s 3 checks in a row; 5 % makes it 4-10x here, still
        # 3.8-6.5x beside 8 busy processes. The retry's healthy ranks (20-step windows of ~4 ms steps) measure 1.0-1.2x
        # here, but once in CI 2.1-2.6x in 3 windows in a row, and factor 2 left out a second, healthy node
        cluster_faults.cpu_quota(node, 0.05)
        finish(run, release_requeued, timeout=400)
    finally:
        cluster_faults.heal()
        if not run.status().state.finished:
            run.cancel()
    second, log = succeeded_without(run, "slow_node", node)
    assert f"slow node: {node} (rank 1)" in log and second.resumed_from_step is not None, log[-3000:]
    summary = json.loads((Path(run.paths.output_dir or "") / "summary.json").read_text())
    assert summary["epochs"] == 15, summary


# attempt 1 waits (its node dies under it); the next attempt finishes at once
WAIT_THEN_FINISH = """
import os, socket, sys, time
print(f"rank {os.environ['NODE_RANK']} on {socket.gethostname()} restart {os.environ.get('SLURM_RESTART_COUNT', '0')}",
      flush=True)
sys.exit(0) if os.environ.get("SLURM_RESTART_COUNT", "0") != "0" else time.sleep(300)
"""


def log_so_far(run: Run) -> str:
    """The job's log, or '' before slurmd has created it."""
    try:
        return "\n".join(run.logs())
    except EngineError:
        return ""


def test_dead_node_is_left_out_of_the_retry(
    netns_cluster: Cluster, cluster_faults: Faults, tmp_path: Path, home: Path,
    release_requeued: Callable[[str], None],
) -> None:  # fmt: skip
    """Issue 24's done-when d: the node of rank 1 dies (link down, slurmd and every process killed); the attempt
    ends node_lost naming it, and the retry runs on the two nodes left and succeeds. Last in this file: the
    next test that asks for the cluster gets a fresh one."""
    job = Job.parse({"name": "dead", "command": [sys.executable, "-c", WAIT_THEN_FINISH], "launch": "per_node",
                     "resources": {"nodes": 2, "procs_per_node": 1}, "max_runtime": "10m", "retries": 1,
                     "slurm": {"workdir": str(tmp_path)}})  # fmt: skip
    run = job.submit("slurm")
    deadline = time.monotonic() + 120
    while "rank 1 on" not in (log := log_so_far(run)):
        assert time.monotonic() < deadline, log[-3000:]
        time.sleep(0.5)
    node = log.split("rank 1 on ", 1)[1].split()[0]
    cluster_faults.kill_node(node)
    finish(run, release_requeued, timeout=300)
    succeeded_without(run, "node_lost", node)

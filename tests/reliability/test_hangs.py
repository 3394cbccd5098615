"""Hangs and slow ranks on the local target (2 gloo processes, real processes end to end): the hang
watchdog, its roll call and record, the straggler check and its `exclude`, a `command:` job's hang
rule in the launcher, and the launcher's line-based output. Faults come from SIGSTOP or failpoints
(TRAINER_FAILPOINTS); `RELIABILITY_TRIALS` repeats the SIGSTOP trial for the detection figures."""

from __future__ import annotations

import json
import pickle
import re
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import procs  # tests/support (on sys.path through tests/conftest.py)
import pytest
from trainctl import Job, Run
from trainer.exit_codes import EXIT_HANG, EXIT_SLOW_NODE

from .conftest import report, rng, trials, wait_for, workers

pytestmark = pytest.mark.slow
HANG_TIMEOUT_S = 8
# the launcher SIGKILLs the stopped worker at teardown (trainer/launcher/teardown.py); torchrun alone gave it 30 s of SIGTERM grace
TEARDOWN_S = 20


@pytest.fixture(autouse=True)
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("TRAINCTL_HOME", str(tmp_path / "home"))
    return tmp_path / "home"


def trainer_job(data: Path, name: str, steps: int = 100_000, env: dict[str, str] | None = None, **trainer: Any) -> Job:
    """mlp-regression on 2 local processes: ~16 steps per epoch, as many epochs as `steps` needs."""
    settings = {"model": "mlp-regression", "train_data": str(data), "batch_size": 8, "epochs": steps // 16 + 1,
                "max_steps": steps, "lr": 0.01, "log_every": 5, "timeout_s": 60, **trainer}  # fmt: skip
    return Job.parse({"name": name, "trainer": settings, "resources": {"procs_per_node": 2},
                      "checkpoint": {"every_steps": 20}, "env": env or {}})  # fmt: skip


def output(run: Run) -> Path:
    return Path(run.paths.output_dir)


def steps_done(run: Run) -> int:
    path = output(run) / "metrics.jsonl"
    lines = path.read_text().splitlines() if path.exists() else []
    return max((json.loads(x)["step"] for x in lines if '"kind": "train"' in x), default=0)


def finish(run: Run, timeout: float) -> tuple[str, int | None, str]:
    status = run.wait(timeout=timeout, poll=0.5)
    return status.state.value, status.exit_code, "\n".join(run.logs())


def detection_s(record: dict[str, Any]) -> float:
    """From the last completed step (the live ranks' heartbeats) to the record."""
    last = max(r["step_at"] for r in record["ranks"] if r["answered"])
    return round(record["time"] - last, 1)


def assert_stacks_in_log(log: str, rank: int) -> None:
    """The rank's dump: its header, then every thread with frames, the main thread among them."""
    block = log.split(f"[rank{rank}] stacks of rank {rank}", 1)
    assert len(block) == 2, f"no stacks of rank {rank} in the log:\n{log[-3000:]}"
    assert f"[rank{rank}] thread MainThread" in block[1] and f'[rank{rank}]     File "' in block[1], block[1][:2000]


@pytest.mark.long  # a stopped rank on real hosts: tests/slurm/test_netns_retries.py
def test_stopped_rank_is_reported_within_hang_timeout(regression_data: Path) -> None:
    """SIGSTOP of one rank mid-run: the other rank's watchdog declares the hang, dumps its stacks,
    names the stopped rank (no heartbeat, no answer to the roll call) and exits 200."""
    n, r = max(1, trials(1)), rng("hang-sigstop")
    rows: list[dict[str, Any]] = []
    for i in range(n):
        run = trainer_job(regression_data, f"stop-{i}", hang_timeout=HANG_TIMEOUT_S).submit("local")
        reach = 30 + r.randint(0, 40)
        wait_for(lambda: steps_done(run) >= reach, 180, "training to run")  # noqa: B023
        rank = r.choice([0, 1])
        pid = workers(int(run.handle.pid))[rank]
        stopped = time.time()
        signal_and_wait_stopped(pid)
        record_path = output(run) / "failure.json"
        wait_for(record_path.exists, HANG_TIMEOUT_S + 30, "failure.json")
        seen = time.time()
        state, code, log = finish(run, timeout=TEARDOWN_S)  # from the record on: no 30 s wait for the stopped rank
        record = json.loads(record_path.read_text())
        live = 1 - rank
        assert (state, code) == ("failed", EXIT_HANG), log[-3000:]
        assert record["kind"] == "hang" and record["exit_code"] == EXIT_HANG and record["reporter"]["rank"] == live
        assert [(s["rank"], "roll call" in s["why"]) for s in record["suspects"]] == [(rank, True)], record
        assert record["suspects"][0]["heartbeat_age_s"] >= HANG_TIMEOUT_S - 2, record
        assert detection_s(record) <= HANG_TIMEOUT_S + 30, record
        assert_stacks_in_log(log, live)
        assert f"[rank{live}] hang at step {record['step']}: suspect rank {rank}" in log
        failure = run.status().failure
        assert failure is not None and failure.kind == "hang" and failure.suspects[0].rank == rank
        rows.append({"rank": rank, "step": record["step"], "detected_s": detection_s(record),
                     "record_after_stop_s": round(seen - stopped, 1)})  # fmt: skip
    figures = [row["detected_s"] for row in rows]
    report("hang-sigstop-local", trials=n, hang_timeout_s=HANG_TIMEOUT_S, detected_median_s=statistics.median(figures),
           detected_max_s=max(figures), rows=rows)  # fmt: skip


def test_per_node_beats_a_stopped_leader_is_named_alone(regression_data: Path) -> None:
    """The per-node heartbeat forced on (trainer/nodebeat.py; a job uses it from 64 ranks): rank 0, the node's
    leader, sends both ranks' beats in one multi_set until SIGSTOP; rank 1 then publishes itself, declares the
    hang and names rank 0 alone, its beat as old as the stop."""
    env = {"TRAINCTL_NODE_BEATS": "1"}
    run = trainer_job(regression_data, "stop-leader", env=env, hang_timeout=HANG_TIMEOUT_S).submit("local")
    wait_for(lambda: steps_done(run) >= 30, 180, "training to run")
    signal_and_wait_stopped(workers(int(run.handle.pid))[0])
    wait_for((output(run) / "failure.json").exists, HANG_TIMEOUT_S + 30, "failure.json")
    state, code, log = finish(run, timeout=TEARDOWN_S)
    record = json.loads((output(run) / "failure.json").read_text())
    assert (state, code) == ("failed", EXIT_HANG) and record["reporter"]["rank"] == 1, log[-3000:]
    assert [(s["rank"], "roll call" in s["why"]) for s in record["suspects"]] == [(0, True)], record
    assert record["suspects"][0]["heartbeat_age_s"] >= HANG_TIMEOUT_S - 2, record
    assert detection_s(record) <= HANG_TIMEOUT_S + 30, record


def signal_and_wait_stopped(pid: int) -> None:
    import os

    os.kill(pid, signal.SIGSTOP)
    wait_for(lambda: procs.stopped(pid), 30, "state T (stopped)")


def test_hang_inside_an_allreduce_names_the_rank_that_never_joined(regression_data: Path) -> None:
    """Rank 1 hangs in DDP's gradient all-reduce hook (failpoint) at its 41st bucket: both ranks are
    alive, both dump their stacks; the suspect is the one that issued one collective less, which
    torch's own flight recorder (the dumps in the output folder) confirms."""
    env = {"TRAINER_FAILPOINTS": "allreduce@1=40*off->hang"}
    run = trainer_job(regression_data, "allreduce-hang", env=env, hang_timeout=HANG_TIMEOUT_S).submit("local")
    state, code, log = finish(run, timeout=240)
    assert (state, code) == ("failed", EXIT_HANG), log[-3000:]
    record = json.loads((output(run) / "failure.json").read_text())
    (suspect,) = record["suspects"]
    assert suspect["rank"] == 1 and suspect["why"].startswith("alive but behind"), record
    assert detection_s(record) <= HANG_TIMEOUT_S + 30, record
    for rank in (0, 1):
        assert_stacks_in_log(log, rank)
    assert re.search(r"\[rank1\]\s+File \".*distributed.py\", line \d+, in allreduce_failpoint_hook", log), log[-4000:]
    last = {}
    for rank in (0, 1):
        dump = pickle.loads((output(run) / "flight_recorder" / f"rank_{rank}").read_bytes())
        last[rank] = max(e["collective_seq_id"] for e in dump["entries"])
    counts = {r["rank"]: r["collectives"] for r in record["ranks"]}
    assert last == counts and last[1] == last[0] - 1, (last, counts)


def test_a_dead_heartbeat_alone_is_no_hang(regression_data: Path) -> None:
    """Rank 1's watchdog thread hangs before its first heartbeat while training goes on: no hang."""
    env = {"TRAINER_FAILPOINTS": "heartbeat@1=hang"}
    run = trainer_job(regression_data, "quiet-beat", steps=150, env=env, hang_timeout=HANG_TIMEOUT_S).submit("local")
    state, code, log = finish(run, timeout=240)
    assert (state, code) == ("succeeded", 0), log[-3000:]
    assert "failpoint heartbeat (rank 1, hit 1): hang" in log and not (output(run) / "failure.json").exists()


def test_slow_rank_is_named_with_its_ratio(regression_data: Path) -> None:
    """Rank 1 sleeps 25 ms in every step's compute (failpoint): the straggler check names it in the log,
    metrics.jsonl, slow_nodes.json and `trainctl status`, and the run still finishes (warn)."""
    env = {"TRAINER_FAILPOINTS": "compute@1=slow(25)"}
    run = trainer_job(regression_data, "slow-rank", steps=60, env=env).submit("local")
    state, code, log = finish(run, timeout=240)
    assert (state, code) == ("succeeded", 0), log[-3000:]
    lines = re.findall(r"\[rank0\] slow node: (\S+) \(rank 1\) computes [\d.]+ ms/step, ([\d.]+)x the median", log)
    assert len(lines) == 3, log[-3000:]  # steps 20, 40, 60
    metrics = [json.loads(x) for x in (output(run) / "metrics.jsonl").read_text().splitlines()]
    checks = [m for m in metrics if m["kind"] == "stragglers"]
    assert [c["step"] for c in checks] == [20, 40, 60] and all(c["slow"][0]["rank"] == 1 for c in checks)
    (shown,) = run.status().slow_nodes
    assert shown.rank == 1 and shown.ratio is not None and shown.ratio > 2 and shown.node == lines[0][0], shown
    text = subprocess.run(
        [sys.executable, "-m", "trainctl", "status", run.id], capture_output=True, text=True, timeout=60
    )
    assert f"slow node: {shown.node} (rank 1): {shown.ratio}x the median compute time (steps 20-60)" in text.stdout
    report("slow-rank-local", ratio=shown.ratio, max_ratio=shown.max_ratio, compute_ms=checks[-1]["compute_ms"])


def test_exclude_checkpoints_and_exits_with_the_slow_node_code(regression_data: Path) -> None:
    env = {"TRAINER_FAILPOINTS": "compute@1=slow(25)"}
    run = trainer_job(regression_data, "exclude", env=env, stragglers="exclude").submit("local")
    state, code, log = finish(run, timeout=240)
    assert (state, code) == ("failed", EXIT_SLOW_NODE), log[-3000:]
    record = json.loads((output(run) / "failure.json").read_text())
    assert record["kind"] == "slow_node" and record["step"] == 60 and record["suspects"][0]["rank"] == 1, record
    assert record["checkpoint"].endswith("step-00000060") and (Path(record["checkpoint"]) / "meta.json").exists()
    assert f"exiting {EXIT_SLOW_NODE}" in log and "Traceback" not in log


STEPPER = """
import os, sys, threading, time
import torch, torch.distributed as dist
dist.init_process_group("gloo")
rank = dist.get_rank()
def noise():
    while True:
        print("loader: still here", flush=True)  # output that is no progress
        time.sleep(0.3)
threading.Thread(target=noise, daemon=True).start()
for step in range(1, 100000):
    if rank == 1 and step == int(os.environ["STALL_AT"]):
        time.sleep(3600)  # rank 1 stalls in its own code; rank 0 waits in the all-reduce
    dist.all_reduce(torch.ones(4))
    if rank == 0:
        print(f"step {step} loss 0.1", flush=True)
    time.sleep(0.05)
"""


def test_command_job_quiet_for_is_a_hang(tmp_path: Path) -> None:
    """`hang: {quiet_for: 6, progress: '^step \\d+'}`: after rank 1 stalls, rank 0's progress lines stop
    (the noise lines go on); the launcher declares the hang, the log holds both workers' Python stacks
    (faulthandler, with their rank prefix), failure.json is the launcher's, and the exit code is 200."""
    script = tmp_path / "stepper.py"
    script.write_text(STEPPER)
    job = Job.parse({"name": "stepper", "command": ["python", str(script)], "resources": {"procs_per_node": 2},
                     "hang": {"quiet_for": 6, "progress": r"^step \d+"}, "env": {"STALL_AT": "40"}})  # fmt: skip
    run = job.submit("local")
    state, code, log = finish(run, timeout=180)
    assert (state, code) == ("failed", EXIT_HANG), log[-3000:]
    assert re.search(r"trainer-launch: hang: no line matching '\^step \\\\d\+' from this node's workers for \d+ s "
                     r"\(hang.quiet_for 6 s\); last: rank 0 'step 3\d", log), log[-3000:]  # fmt: skip
    for rank in (0, 1):  # faulthandler's dump of every thread, each line with the rank's prefix
        assert re.search(rf"\[rank{rank}\] (Current thread|Thread) 0x[0-9a-f]+ \(most recent call first\):", log), log[
            -4000:
        ]
    stall = next(i for i, line in enumerate(STEPPER.splitlines(), 1) if "sleep(3600)" in line)
    assert re.search(rf'\[rank1\]   File ".*stepper.py", line {stall} in <module>', log), log[
        -4000:
    ]  # where it stalled
    record = json.loads((output(run) / "failure.json").read_text())
    assert record["kind"] == "hang" and record["source"] == "launcher" and record["suspects"] == []
    assert {r["rank"] for r in record["ranks"]} == {0, 1} and record["quiet_s"] >= 6


GLUE = """
import os, sys
rank = os.environ["RANK"]
for i in range(300):
    for ch in f"rank{rank} line {i} " + "x" * 40:
        sys.stdout.write(ch)
        sys.stdout.flush()
    sys.stdout.write("\\n")
sys.stdout.write(f"rank{rank} no newline at the end")
"""


def test_command_output_is_whole_lines_with_a_rank_prefix(tmp_path: Path) -> None:
    """Two ranks write their lines one character at a time: every line of the log is one rank's whole line."""
    script = tmp_path / "glue.py"
    script.write_text(GLUE)
    job = Job.parse({"name": "glue", "command": ["python", str(script)], "resources": {"procs_per_node": 2}})  # fmt: skip
    run = job.submit("local")
    state, _, log = finish(run, timeout=120)
    assert state == "succeeded", log[-3000:]
    ours = [line for line in log.splitlines() if re.search(r"rank[01] (line|no newline)", line)]
    whole = re.compile(r"^\[rank([01])\] rank\1 (line \d+ x{40}|no newline at the end)$")
    assert len(ours) == 602 and all(whole.match(line) for line in ours), [x for x in ours if not whole.match(x)][:5]

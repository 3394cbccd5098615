"""The stand-in ranks spread over worker processes (bench/scale/spread.py): the quick smoke's sizes fit one
process, so this runs 64 ranks as 4 workers of 16 and checks the cross-process step barrier, counters and
roll call (the stopped rank, in one worker, is the one suspect)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_64_ranks_in_4_workers_name_the_stopped_rank(tmp_path: Path) -> None:
    # The workers at this test's niceness, not the benchmark's 19: CI's other tests train at nice 0, and beside
    # them a nice-19 worker got so little CPU that a rank in a worker the victim was not in missed the roll call
    # and was named too (suspects [35, 57], victim 57, detect 13.2 s at hang_timeout 4). The benchmark alone
    # keeps 19, so that the store host runs first (bench/scale/spread.py)
    env = {**os.environ, "BENCH_SCALE_RANKS_PER_PROC": "16", "BENCH_SCALE_WORKER_NICE": "0"}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")])
    # hang_timeout 4 s: the workers run at nice 19 (bench/scale/spread.py), and in CI, beside the benchmarks' smoke
    # test at nice 0, a 2 s timeout once gave no right suspect (which way was not recorded; `said` shows it now):
    # a worker starved past 2 s is the likely cause, the machine's and not the design's
    argv = [sys.executable, "-m", "bench.scale.ranks", "64", "4", str(tmp_path / "out"), "2", "retry-now"]
    proc = subprocess.run(argv, cwd=ROOT, env=env, capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads([ln for ln in proc.stdout.splitlines() if ln.startswith("{")][-1])
    assert (result["processes"], result["ranks_per_process"], result["threads"]) == (4, 16, 64)
    assert result["steps"] > 0 and result["heartbeat_ops_s"] > 0  # steps reached every worker; beats the store
    assert result["connections_open_beating"] == 8  # one per stand-in node: its leader's (trainer/nodebeat.py)
    said = {
        k: result.get(k) for k in ("declared", "detect_s", "victim", "suspects", "suspects_why", "late", "load_avg")
    }
    assert result["right_suspect"], said

"""Issue 41 on the real SLURM cluster: job ids repeat, a run's folder, attempts and log do not.

A controller whose state was reset (a rebuild, a lost StateSaveLocation) numbers its jobs from the first id
again, and so does another cluster over the same shared filesystem. Each case here is real: the test cluster is
started again with its state cleared (`scripts/slurm-cluster.sh` empties StateSaveLocation), as the plain
two-node cluster or as the three-host netns cluster, between two submissions of one job (another `lr`) to one
`slurm.workdir`. The second run gets the first one's job id, and still starts at step 0 with one attempt, its own
folder `runs/<job id>-<uid>` and its own log; the first run's folder is left as it was.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from slurm_cluster import NETNS, PLAIN, Shape, SlurmClusters
from trainctl import Job, Run, RunState
from trainctl.targets.slurm import engine as slurm_engine

pytestmark = [pytest.mark.slurm, pytest.mark.slow]


def _run(data: Path, workdir: Path, lr: float) -> Run:
    job = Job.parse(
        {
            "name": "digits",
            "trainer": {"model": "digits", "batch_size": 32, "epochs": 1, "lr": lr, "log_every": 10},
            "resources": {"nodes": 2, "procs_per_node": 1},
            "data": {"train": str(data / "train.jsonl"), "val": str(data / "val.jsonl")},
            "checkpoint": {"every_steps": 10},
            "retries": 1,  # the retry lines run around the attempt and keep attempts.jsonl
            "slurm": {"python_env": sys.prefix, "workdir": str(workdir)},
        }
    )
    run = job.submit("slurm")
    final = slurm_engine.wait_for(run, timeout=400, poll=1.0)
    assert final.state is RunState.SUCCEEDED, "\n".join(run.logs())[-4000:]
    return run


def _attempts(run: Run) -> list[dict[str, object]]:
    lines = (Path(run.paths.run_dir) / "attempts.jsonl").read_text().splitlines()
    return [json.loads(line) for line in lines]


@pytest.mark.parametrize("second", [PLAIN, NETNS], ids=["state-reset", "another-cluster"])
def test_a_repeated_job_id_starts_a_run_of_its_own(
    slurm_clusters: SlurmClusters, digits_data: Path, tmp_path: Path, home: Path, second: Shape
) -> None:
    workdir = tmp_path / "w"
    slurm_clusters.start(PLAIN)  # a fresh controller: its first job id
    first = _run(digits_data, workdir, 0.003)
    old = Path(first.paths.run_dir)
    before = {p: p.stat().st_mtime_ns for p in old.rglob("*")}
    slurm_clusters.start(second)  # the state cleared, or another cluster over this filesystem: ids repeat
    again = _run(digits_data, workdir, 0.01)
    assert again.native_id == first.native_id, "the cluster should have given the same job id again"
    assert again.run_uid != first.run_uid and again.paths.run_dir != first.paths.run_dir
    assert again.paths.run_dir == str(workdir / "runs" / f"{again.native_id}-{again.run_uid}")
    assert again.paths.log != first.paths.log and again.run_uid in again.paths.log
    log = Path(again.paths.log).read_text()
    assert first.run_uid not in log and "resumed from" not in log and "step 10/" in log, log[-3000:]
    assert f"trainctl: run {again.run_uid} in {again.paths.run_dir}" in log
    rows = _attempts(again)
    assert [r["event"] for r in rows] == ["start", "end"] and rows[0]["resumed_from_step"] is None, rows
    assert {r["run_uid"] for r in rows} == {again.run_uid}
    assert (Path(again.paths.run_dir) / "run-uid").read_text().strip() == again.run_uid
    summary = json.loads((Path(again.paths.output_dir) / "summary.json").read_text())
    assert summary["resumed_from"] is None, summary
    assert {p: p.stat().st_mtime_ns for p in old.rglob("*")} == before, "the first run's folder is untouched"


def test_a_script_submitted_by_hand_keeps_its_uid_across_a_requeue(tmp_path: Path) -> None:
    """The rendered script without a uid (as `trainctl render` shows it): the first start makes one; a requeue
    (SLURM_RESTART_COUNT) keeps it; a new job with the same id (restart count 0) makes another."""
    import subprocess

    from trainctl.targets.slurm.words import run_dir_line, uid_lines

    lines = [
        "set -euo pipefail",
        *uid_lines(str(tmp_path), None),
        run_dir_line(str(tmp_path)),
        'echo "$TRAINCTL_RUN_DIR"',
    ]
    script = "\n".join(lines)

    def start(restart: int) -> str:
        env = {"PATH": "/usr/bin:/bin", "SLURM_JOB_ID": "2", "SLURM_RESTART_COUNT": str(restart)}
        done = subprocess.run(["bash", "-c", script], capture_output=True, text=True, env=env, check=True)
        return done.stdout.strip()

    first = start(0)
    assert first.startswith(f"{tmp_path}/runs/2-") and len(first.rsplit("-", 1)[1]) == 32
    assert start(1) == first  # a requeue: the same run, the same folder
    assert start(0) != first  # a new job that got id 2 again: a new run

"""Training on the real local cluster: the digits job 2 nodes x 2 processes (its step rising in `trainctl status`
while it trains), and preemption + resume."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from digits import example_digits  # tests/support
from trainctl import Job, RunState
from trainctl.runs.store import RunStore
from trainctl.targets.slurm import engine as slurm_engine

pytestmark = [pytest.mark.slurm, pytest.mark.slow]
ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "digits.yaml"


@pytest.fixture(scope="module")
def example_data() -> Path:
    """examples/digits.yaml reads examples/data/digits."""
    return example_digits()


def test_cli_submit_wait_digits_two_nodes_two_processes(
    cluster: object, example_data: Path, tmp_path: Path, home: Path
) -> None:
    workdir = tmp_path / "runs"
    trainctl = Path(sys.prefix) / "bin" / "trainctl"
    argv = [
        str(trainctl), "submit", str(EXAMPLE), "--target", "slurm", "--wait",
        "--set", "resources.nodes=2", "--set", "resources.procs_per_node=2",
        "--set", f"slurm.python_env={sys.prefix}", "--set", f"slurm.workdir={workdir}",
        "--set", "trainer.epochs=20",  # about 250 steps: long enough for status to see several while it trains
    ]  # fmt: skip
    submit = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=os.environ)
    # while it trains, `trainctl status` reads its progress from the job's folder: the step rises
    deadline = time.monotonic() + 240
    while not RunStore().list() and submit.poll() is None and time.monotonic() < deadline:
        time.sleep(0.2)
    seen: list[dict[str, Any]] = []
    while submit.poll() is None and time.monotonic() < deadline:
        shown = subprocess.run([str(trainctl), "status", RunStore().list()[0].id, "--output", "json"],
                               capture_output=True, text=True, timeout=60)  # fmt: skip
        if json.loads(shown.stdout or "{}").get("state") == "running":
            seen.append(json.loads(shown.stdout).get("progress") or {})
    stdout, stderr = submit.communicate(timeout=max(1.0, deadline - time.monotonic()))
    assert submit.returncode == 0, stdout[-3000:] + stderr[-3000:]
    assert "succeeded" in stdout
    run_id = stderr.split("submitted ", 1)[1].split()[0]
    steps = [p["step"] for p in seen if "step" in p]
    assert len(set(steps)) >= 2 and steps == sorted(steps), seen
    assert all(p["total_steps"] == steps_total(seen) and p["samples_per_s"] > 0 for p in seen if "step" in p), seen
    recorded = RunStore().get(run_id)
    assert recorded is not None and recorded.run_uid is not None
    output = workdir / "runs" / f"{recorded.native_id}-{recorded.run_uid}" / "output"  # the run's own folder
    assert f"output in: {output}" in stdout
    summary = json.loads((output / "summary.json").read_text())
    assert summary["world_size"] == 4 and summary["val_accuracy"] > 0.9
    # container: none ran no image: the record and summary.json say so, not the job's image (found by hand)
    ran = f"none (slurm.container: none; the environment {sys.prefix} on the nodes)"
    assert recorded.provenance is not None and recorded.provenance.image == ran, recorded.provenance
    assert summary["provenance"]["image"] == ran, summary["provenance"]
    metrics = [json.loads(line) for line in (output / "metrics.jsonl").read_text().splitlines()]
    assert {m.get("world_size") for m in metrics if "world_size" in m} == {4}
    log = next(workdir.glob("digits-*.out")).read_text()
    assert "on n[1-2], master n1:" in log and "2 node(s) x 2 process(es)" in log
    status = subprocess.run([str(trainctl), "status", run_id], capture_output=True, text=True, timeout=60)
    assert "succeeded (COMPLETED)" in status.stdout, status.stdout + status.stderr
    steps_done = summary["steps"]
    assert f"progress: step {steps_done}/{steps_done} (100 %) · epoch " in status.stdout, status.stdout
    assert steps_total(seen) == steps_done and "trainctl progress: step=" in log
    # trainctl metrics reads the job's metrics.jsonl through the cluster's shell
    shown = subprocess.run(
        [str(trainctl), "metrics", run_id, "--output", "json"], capture_output=True, text=True, timeout=60
    )
    assert [{k: v for k, v in r.items() if k != "run"} for r in json.loads(shown.stdout)] == metrics, shown.stderr
    # trainctl pull copies the output, the final model with it, through the cluster's shell (issue 37 §2)
    pulled = subprocess.run([str(trainctl), "pull", run_id, str(tmp_path / "pulled"), "--output", "json"],
                            capture_output=True, text=True, timeout=60)  # fmt: skip
    assert pulled.returncode == 0, pulled.stderr
    assert {"model.safetensors", "model.json", "summary.json"} <= set(json.loads(pulled.stdout)["files"])
    assert (tmp_path / "pulled" / "model.safetensors").read_bytes() == (output / "model.safetensors").read_bytes()


def steps_total(seen: list[dict[str, Any]]) -> int:
    return next(p["total_steps"] for p in seen if "total_steps" in p)


@pytest.mark.parametrize(("launch", "procs"), [("torchrun", 1), ("srun", 2)])
def test_preemption_checkpoints_requeues_and_resumes(
    cluster: object,
    digits_data: Path,
    tmp_path: Path,
    home: Path,
    release_requeued: Callable[[str], None],
    no_host_python: Path,
    launch: str,
    procs: int,
) -> None:
    """SIGUSR1 before the time limit (scancel --signal=USR1 reaches every task of the step): under trainctl's
    torchrun the agent passes it on; with slurm.launch: srun every trainer process is a task and gets it. The
    batch host's python3 exits 1 (no_host_python): the requeue needs none."""
    job = Job.parse(
        {
            "name": "preempt",
            "trainer": {"model": "digits", "epochs": 10, "max_steps": 200, "lr": 0.003, "log_every": 20},
            "resources": {"nodes": 2, "procs_per_node": procs},
            "data": {"train": str(digits_data / "train.jsonl"), "val": str(digits_data / "val.jsonl")},
            "checkpoint": {"every_steps": 4},
            "slurm": {"workdir": str(tmp_path / "w"), "preemption": True, "launch": launch},
        }
    )
    run = job.submit("slurm")
    ckpts = tmp_path / "w" / "runs" / f"{run.native_id}-{run.run_uid}" / "checkpoints"  # a requeue keeps both
    deadline = time.monotonic() + 120
    while not list(ckpts.glob("step-*")):
        assert time.monotonic() < deadline, "no checkpoint before preemption:\n" + "\n".join(run.logs())
        time.sleep(0.3)
    subprocess.run(["scancel", "--signal=USR1", run.native_id], check=True, timeout=30)
    # The script requeues itself; SLURM holds a requeued job ~2 min (BeginTime): release it at once.
    deadline = time.monotonic() + 60
    while True:
        status = slurm_engine.status(run)
        if status.restarts >= 1 and status.state is RunState.QUEUED:
            release_requeued(run.native_id)
            break
        assert status.state is not RunState.SUCCEEDED, "finished without being preempted"
        assert time.monotonic() < deadline, f"not requeued: {status}"
        time.sleep(0.3)
    final = slurm_engine.wait_for(run, timeout=180, poll=0.5)
    log = "\n".join(run.logs())
    assert final.state is RunState.SUCCEEDED, log
    assert "stop requested (SIGUSR1)" in log and "requeueing job" in log
    summary = slurm_engine.summary(run)
    assert summary is not None and summary["resumed_from"], log
    assert summary["resumed_from"].startswith(str(ckpts)) and summary["world_size"] == 2 * procs
    assert f"resumed from {summary['resumed_from']}" in log
    assert final.restarts == 1

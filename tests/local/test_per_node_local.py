"""`launch: per_node` on the local target, for real (issue 29): the user's own `torchrun --nnodes 1
--nproc-per-node 2 train.py` (shipped with `code:`) runs once, as the node's command, with the node's variables
and a free port; it trains with world 2 in the run's work/ folder and its checkpoint lands in the run's own
checkpoints/; the run records its provenance; cancel stops the torchrun and both of its workers."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pytest
from trainctl import Job, RunState
from trainctl.submit.bundle import bundle_for

pytestmark = pytest.mark.slow
ROOT = Path(__file__).resolve().parents[2]
COMMAND = ["torchrun", "--nnodes", "1", "--nproc-per-node", "2", "train.py"]


def per_node_job(*args: str) -> Job:
    return Job.parse({"name": "own-torchrun", "command": [*COMMAND, *args], "launch": "per_node",
                      "code": str(ROOT / "tests" / "programs" / "per_node"), "resources": {"procs_per_node": 2}})  # fmt: skip


def test_the_users_torchrun_trains_in_the_runs_folders() -> None:
    job = per_node_job()
    run = job.submit("local")
    final = run.wait(timeout=300, poll=0.3)
    log = "\n".join(run.logs())
    assert final.state is RunState.SUCCEEDED, log[-4000:]
    run_dir = Path(run.paths.run_dir)
    result = json.loads((run_dir / "output" / "result.json").read_text())
    assert result["world_size"] == 2 and result["cwd"] == str(run_dir / "work"), result
    for r in result["ranks"]:
        node = r["node"]
        assert (node["NNODES"], node["NODE_RANK"], node["NPROC_PER_NODE"], node["MASTER_ADDR"]) == (
            "1", "0", "2", "127.0.0.1"
        ), node  # fmt: skip
        assert int(node["MASTER_PORT"]) > 1024 and r["torchelastic"], r
    assert (run_dir / "checkpoints" / "model.pt").is_file()
    assert log.count("your command once per node") == 1 and "verified; running from" in log
    bundle = bundle_for(job)
    assert bundle is not None and run.provenance.code_sha256 == bundle.sha256


def test_cancel_stops_the_users_torchrun_and_its_workers(helpers: SimpleNamespace) -> None:
    run = per_node_job("--hold", "300").submit("local")
    try:
        log = Path(run.paths.log)
        helpers.wait_for(lambda: log.is_file() and log.read_text().count("holding") == 2, 120, "both workers")
        procs = helpers.of_run(run.paths.run_dir)
        names = " ".join(" ".join(p.cmdline()) for p in procs)
        assert names.count("train.py --hold") == 3, names  # the user's torchrun and its 2 workers
        run.cancel()
        assert run.wait(timeout=60, poll=0.3).state is RunState.CANCELLED
        assert helpers.of_run(run.paths.run_dir) == [], "a process of the run survived cancel"
    finally:
        if run.status().state is RunState.RUNNING:
            run.cancel()

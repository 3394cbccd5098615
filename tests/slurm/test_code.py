"""`code:` on the real local cluster: the example folder, copied to the shared workdir, runs on 2 nodes x 2."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from trainctl import Job
from trainctl.runs.store import RunStore
from trainctl.submit.bundle import bundle_for

pytestmark = [pytest.mark.slurm, pytest.mark.slow]
ROOT = Path(__file__).resolve().parents[2]


def test_example_folder_runs_on_two_nodes_from_the_shared_workdir(cluster: object, tmp_path: Path, home: Path) -> None:
    folder = tmp_path / "code-job"
    shutil.copytree(ROOT / "examples" / "code-job", folder)
    workdir = tmp_path / "runs"
    bundle = bundle_for(Job.from_yaml(folder / "job.yaml"))
    assert bundle is not None
    trainctl = Path(sys.prefix) / "bin" / "trainctl"
    argv = [
        str(trainctl), "submit", str(folder / "job.yaml"), "--target", "slurm", "--wait",
        "--set", "resources.nodes=2",
        "--set", f"slurm.python_env={sys.prefix}", "--set", f"slurm.workdir={workdir}",
    ]  # fmt: skip
    done = subprocess.run(argv, capture_output=True, text=True, timeout=240, env=os.environ)
    log = "\n".join(p.read_text() for p in workdir.glob("code-job-*.out"))
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:] + log[-3000:]
    shipped = workdir / f"code-{bundle.sha256[:12]}.tar.gz"
    assert shipped.read_bytes() == bundle.data
    run_id = done.stderr.split("submitted ", 1)[1].split()[0]
    recorded = RunStore().get(run_id)
    assert recorded is not None
    run_dir = workdir / "runs" / f"{recorded.native_id}-{recorded.run_uid}"  # its own folder; the code in work/
    result = json.loads((run_dir / "output" / "result.json").read_text())
    assert result["greeting"] == "hello from helper.py" and result["world_size"] == 4
    assert result["code_dir"] == str(run_dir / "work")
    assert log.count(f"code sha256 {bundle.sha256} verified") == 2, log  # one launcher per node
    status = subprocess.run([str(trainctl), "status", run_id, "--output", "json"], capture_output=True, text=True)
    assert json.loads(status.stdout)["provenance"]["code_sha256"] == bundle.sha256

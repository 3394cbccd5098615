"""`--resume-from` onto the real local SLURM cluster (issue 18): a 2-process local digits run killed after
its first checkpoint continues as 2 nodes x 1 process and ends bit-identical to an uninterrupted run."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import torch
import yaml
from trainctl import Job
from trainctl.runs.store import RunStore

pytestmark = [pytest.mark.slurm, pytest.mark.slow]


def _newest(folder: Path) -> Path:
    return sorted(folder.glob("step-*"))[-1]


@pytest.mark.long  # CI: the same resume across real hosts (test_multihost) and --resume-from's CLI (test_isolation)
def test_local_run_killed_then_resumed_on_slurm_is_bit_identical(
    cluster: object, digits_data: Path, tmp_path: Path, home: Path, resume_helpers: Any, killed_source: Any
) -> None:
    whole = Job.parse(resume_helpers.job(digits_data, "whole", 2)).submit("local")
    assert whole.wait(timeout=300, poll=0.5).state.value == "succeeded", "\n".join(whole.logs())
    source = killed_source.recorded()

    workdir = tmp_path / "w"
    data = resume_helpers.job(digits_data, "moved", 1, slurm={"python_env": sys.prefix, "workdir": str(workdir)})
    data["resources"] = {"nodes": 2, "procs_per_node": 1}
    run_id = resume_helpers.on_slurm(data, tmp_path, source.id)
    trainctl = str(Path(sys.prefix) / "bin" / "trainctl")
    recorded = RunStore().get(run_id)
    assert recorded is not None and recorded.resumed_from is not None
    came = recorded.resumed_from.model_dump()
    run_dir = workdir / "runs" / f"{recorded.native_id}-{recorded.run_uid}"  # held, placed in its folder, released
    assert came["run"] == source.id and came["copied_to"] == str(run_dir / "checkpoints" / f"step-{came['step']:08d}")
    log = next(workdir.glob("moved-*.out")).read_text()
    assert f"at step {came['step']} " in log and "on n[1-2]" in log, log[-3000:]
    summary = json.loads((run_dir / "output" / "summary.json").read_text())
    assert summary["world_size"] == 2 and summary["val_accuracy"] > 0.9

    ours, theirs = _newest(run_dir / "checkpoints"), _newest(Path(whole.paths.checkpoint_dir))
    assert ours.name == theirs.name
    a = torch.load(ours / "state.pt", map_location="cpu", weights_only=True)["model"]
    b = torch.load(theirs / "state.pt", map_location="cpu", weights_only=True)["model"]
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in b), "weights differ from the whole run"
    print(
        f"local 2 -> slurm 2x1 from step {came['step']}: {ours.name}, {len(b)} tensors equal, acc {summary['val_accuracy']:.4f}"
    )
    status = subprocess.run([trainctl, "status", run_id], capture_output=True, text=True, timeout=60)
    assert f"resumed from: {source.id} step {came['step']}" in status.stdout, status.stdout


def test_a_run_behind_a_login_host_is_fetched_over_its_ssh_and_resumed_locally(
    cluster: object, digits_data: Path, tmp_path: Path, fake_ssh: Any, home: Path, resume_helpers: Any
) -> None:
    """Resume anywhere: a SLURM run submitted through `slurm.login` (an ssh stand-in that records each call
    and runs it here, as in test_cluster.py) is cancelled after two checkpoints; `--resume-from` onto the
    local target lists and copies its checkpoint folder through that same ssh command, skips the newest
    (cut short), trains on from the previous one, and records host:path as where it came from."""
    import time

    workdir = tmp_path / "remote"
    login = {
        "python_env": sys.prefix,
        "workdir": str(workdir),
        "login": "me@login",
        "ssh_command": [str(fake_ssh.command)],
    }
    data = resume_helpers.job(digits_data, "behind-login", 1, slurm=login)
    data["resources"] = {"nodes": 2, "procs_per_node": 1}
    source = Job.parse(data).submit("slurm")
    ckpts = workdir / "runs" / f"{source.native_id}-{source.run_uid}" / "checkpoints"
    assert source.handle.login == "me@login" and source.paths.checkpoint_dir == str(ckpts)
    deadline = time.monotonic() + 300
    while len(list(ckpts.glob("step-*/meta.json"))) < 2:
        assert time.monotonic() < deadline, "fewer than 2 checkpoints within 300 s:\n" + "\n".join(source.logs())
        time.sleep(0.2)
    source.cancel()
    assert source.wait(timeout=120, poll=0.5).state.value != "succeeded", "the source run ended before the cancel"
    steps = sorted(ckpts.glob("step-*"))
    with (steps[-1] / "state.pt").open("r+b") as fh:  # the newest cut short: the fetch falls back
        fh.truncate(100)
    chosen = steps[-2]
    fake_ssh.forget()

    job_file = tmp_path / "here.yaml"
    job_file.write_text(yaml.safe_dump(resume_helpers.job(digits_data, "here", 2)))
    trainctl = str(Path(sys.prefix) / "bin" / "trainctl")
    argv = [trainctl, "submit", str(job_file), "--target", "local", "--resume-from", source.id, "--wait"]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=400, env=os.environ)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    run_id = done.stderr.split("submitted ", 1)[1].split()[0]
    resumed = RunStore().get(run_id)
    assert resumed is not None
    came = resumed.resumed_from.model_dump()
    assert came["run"] == source.id and came["target"] == "slurm"
    assert came["checkpoint"] == f"me@login:{chosen}" and came["step"] == int(chosen.name.removeprefix("step-"))
    summary = json.loads((Path(resumed.paths.output_dir) / "summary.json").read_text())
    assert Path(summary["resumed_from"]).name == chosen.name and summary["val_accuracy"] > 0.9, summary

    calls = fake_ssh.calls()
    assert all(c[0] == "me@login" for c in calls), calls
    commands = [c[-1] for c in calls]
    assert commands[0].startswith("ls -1A -- "), commands
    tars = [c for c in commands if c.startswith("tar -c ")]  # the newest (refused), then the chosen: no more
    assert len(tars) == 2 and tars[0].endswith(steps[-1].name) and tars[1].endswith(chosen.name), commands
    status = subprocess.run([trainctl, "status", run_id], capture_output=True, text=True, timeout=60)
    assert f"resumed from: {source.id} step {came['step']} (me@login:{chosen})" in status.stdout, status.stdout
    print(
        f"slurm (login) -> local from {chosen.name}: acc {summary['val_accuracy']:.4f}, {len(steps)} checkpoints there"
    )

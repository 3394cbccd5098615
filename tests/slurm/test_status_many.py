"""`trainctl list --refresh` asks SLURM once for all of a cluster's runs (issue 23), as submitit's InfoWatcher
does (submitit/slurm/slurm.py `SlurmInfoWatcher._make_command`: one call for every job id), not once per run.

The SLURM commands are counted where they are run: shims ahead on PATH log each call, then exec the real one."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from trainctl import Job, Run, RunState
from trainctl.runs.store import RunStore
from trainctl.targets.lookup import get_target
from trainctl.targets.slurm import engine as slurm_engine

pytestmark = pytest.mark.slurm
COUNTED = ("scontrol", "squeue", "sacct", "sinfo", "sbatch")


def counting_path(tmp_path: Path) -> tuple[str, Path]:
    """A PATH whose SLURM commands log `<command> <args>` to the returned file before running the real one."""
    shims, log = tmp_path / "shims", tmp_path / "calls.log"
    shims.mkdir()
    for name in COUNTED:
        real = shutil.which(name)
        assert real is not None, f"{name} is not installed"
        shim = shims / name
        shim.write_text(f'#!/bin/sh\nprintf "%s\\n" "{name} $*" >> "{log}"\nexec "{real}" "$@"\n')
        shim.chmod(0o755)
    return f"{shims}{os.pathsep}{os.environ['PATH']}", log


def test_list_refresh_asks_slurm_once_for_fifty_runs(cluster: object, tmp_path: Path, home: Path) -> None:
    python_env = getattr(cluster, "python_env")  # noqa: B009
    job = Job.parse(
        {"name": "many", "command": ["true"], "slurm": {"python_env": python_env, "workdir": str(tmp_path)}}
    )
    runs = [Run.of(slurm_engine.submit(job, hold=True)) for _ in range(50)]  # held: pending until released
    try:
        for run in runs:
            RunStore().record(run)
        cancelled = runs[:10]
        subprocess.run(["scancel", *(r.native_id for r in cancelled)], check=True, timeout=60)
        path, log = counting_path(tmp_path)
        env = {**os.environ, "PATH": path, "TRAINCTL_HOME": str(home)}
        listed = subprocess.run(
            [sys.executable, "-m", "trainctl", "list", "--refresh", "--output", "json", "--limit", "100"],
            capture_output=True, text=True, env=env, timeout=120,
        )  # fmt: skip
        assert listed.returncode == 0, listed.stderr
        calls = log.read_text().splitlines()
        assert calls == ["scontrol show job -o"], calls  # one call for the 50 runs, none per run
        states = {r["id"]: r["state"] for r in json.loads(listed.stdout)}
        assert len(states) == 50
        assert {states[r.id] for r in cancelled} == {"cancelled"}
        assert {states[r.id] for r in runs[10:]} == {"queued"}
        # the same states and words as one `status` per run (which asks once per run)
        for run in (*runs[:2], *runs[-2:]):
            alone, many = slurm_engine.status(run), get_target("slurm").status_many([run])[run.id]
            assert (alone.state, alone.native_state, alone.reason) == (many.state, many.native_state, many.reason)
        assert slurm_engine.status(runs[-1]).state is RunState.QUEUED
        print(f"list --refresh over {len(runs)} SLURM runs: {len(calls)} engine call ({calls[0]})")
    finally:
        subprocess.run(["scancel", *(r.native_id for r in runs)], timeout=60)

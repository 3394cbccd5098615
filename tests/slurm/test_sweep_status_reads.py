"""`sweep status` over a SLURM array reads its running trials' progress and metrics in one call to the cluster
each, not one per trial (docs/scale.md "Sweeps": 64 running trials made 192 subprocesses). The array is
the stand-ins' of the scale benchmark (bench/scale/sbatch, scontrol, sacct: no cluster is needed); every
command trainctl runs for SLURM goes through `Shell.run`, where the calls are counted."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
from trainctl import Job, Run
from trainctl.sweeps.handle import Sweep
from trainctl.targets.lookup import get_target
from trainctl.targets.slurm import shell

STAND_INS = Path(__file__).resolve().parents[2] / "bench" / "scale"


def _sweep(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, trials: int, running: int) -> Sweep:
    """A sweep of `trials` as one array on the stand-ins, `running` of them running (the rest pending); each
    running trial has written metrics.jsonl and progress.json, or (odd trials) only its log."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for tool in ("sbatch", "scontrol", "sacct"):
        shutil.copy(STAND_INS / tool, bin_dir / tool)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("TRAINCTL_HOME", str(tmp_path / "home"))
    monkeypatch.setattr(Sweep, "start_driver", lambda self: None)  # the rows are read here, not by a driver
    (tmp_path / "train.jsonl").write_text("{}\n")
    job = Job.parse({"name": "reads", "trainer": {"model": "digits"}, "data": {"train": str(tmp_path / "train.jsonl")},
                     "slurm": {"workdir": str(tmp_path / "w")}})  # fmt: skip
    sweep = job.sweep("slurm", grid={"trainer.lr": [0.001 * (i + 1) for i in range(trials)]}, parallel=running)
    monkeypatch.setenv("SCALE_ARRAY_ID", sweep.record.engine_id or "")
    monkeypatch.setenv("SCALE_ARRAY_TASKS", str(trials))
    monkeypatch.setenv("SCALE_ARRAY_RUNNING", str(running))
    for trial in sweep.trials()[:running]:
        paths = Run.from_id(trial.run_id or "").paths
        out, log = Path(paths.output_dir or ""), Path(paths.log or "")
        log.parent.mkdir(parents=True, exist_ok=True)
        step, value = 10 * (trial.index + 1), 0.5 + trial.index / 1000
        if trial.index % 2 == 0:
            out.mkdir(parents=True)
            rows = [{"kind": "train", "step": step, "loss": 1.0}, {"kind": "eval", "step": step, "val_accuracy": value}]
            (out / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
            (out / "progress.json").write_text(json.dumps({"step": step, "total_steps": 1000}))
            log.write_text("starting\n")
        else:  # its log alone (a `command:` program's way)
            log.write_text(f"epoch 1: {json.dumps({'step': step, 'val_accuracy': value})}\n"
                           f"trainctl progress: step={step}/1000 loss=1.0\n")  # fmt: skip
    return sweep


def _counted(monkeypatch: pytest.MonkeyPatch) -> list[list[str]]:
    calls: list[list[str]] = []
    real = subprocess.run

    def run(argv: list[str], *args: Any, **kw: Any) -> subprocess.CompletedProcess[bytes]:
        calls.append(list(argv))
        return real(argv, *args, **kw)

    monkeypatch.setattr(shell.subprocess, "run", run)
    return calls


@pytest.mark.parametrize("running", [4, 16])
def test_sweep_status_reads_every_running_trial_in_one_call_each(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, running: int
) -> None:
    sweep = _sweep(tmp_path, monkeypatch, trials=3 * running, running=running)
    calls = _counted(monkeypatch)
    rows = Sweep.from_id(sweep.id).rows()
    commands = [c[0] if c[0] != "sh" else f"sh: {'metrics' if 'echo M' in c[2] else 'progress'}" for c in calls]
    # one scontrol for every state, one read of every running trial's progress, one of their metrics
    assert sorted(commands) == ["scontrol", "sh: metrics", "sh: progress"], commands
    by_index = {r.index: r for r in rows}
    for index in range(running):  # what each trial wrote, whichever file it was in
        assert by_index[index].state == "running"
        assert (by_index[index].metric, by_index[index].step) == (0.5 + index / 1000, 10 * (index + 1))
    assert {by_index[i].state for i in range(running, 3 * running)} == {"queued"}

    runs = [Run.from_id(t.run_id or "") for t in sweep.trials()[:running]]
    calls.clear()
    statuses = get_target("slurm").status_many(runs)
    assert len(calls) == 2  # scontrol, then the progress of all
    steps = [statuses[r.id].progress.step if statuses[r.id].progress else None for r in runs]  # type: ignore[union-attr]
    assert steps == [10 * (i + 1) for i in range(running)]  # progress.json, else the log's progress line
    alone = [get_target("slurm").engine().progress(r) for r in runs]  # the per-run read agrees
    assert [p.step if p else None for p in alone] == steps

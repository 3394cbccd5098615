"""`trainctl rm` and `trainctl prune` (issue 37 §5: there was no command to remove old runs).

Real local runs (a `command:` job through the detached runner); other targets' runs as records, whose
files are never touched from here."""

from __future__ import annotations

import json
import time
from pathlib import Path

from run_cli import trainctl  # tests/support
from trainctl import Job
from trainctl.runs.state import Paths, RunRef
from trainctl.runs.store import RunStore

PROGRAM = "import os,pathlib; pathlib.Path(os.environ['TRAINER_CHECKPOINT_DIR'], 'w.bin').write_bytes(b'x'*4096)"


def _ended_local_run(**job: object) -> str:
    run = Job.parse({"name": "rm-me", "command": ["python", "-c", PROGRAM], **job}).submit("local")
    assert run.wait(timeout=120, poll=0.2).state.value == "succeeded"
    return run.id


def _recorded(target: str, native_id: str, state: str, age_s: float = 0, sweep: str | None = None) -> str:
    ref = RunRef(target=target, native_id=native_id, job_name="j", created_at=time.time() - age_s, sweep_id=sweep,
                 paths=Paths(run_dir=f"/shared/runs/{native_id}", log=f"/shared/j-{native_id}.out"))  # fmt: skip
    RunStore().record(ref, state)
    return ref.id


def test_rm_deletes_a_local_runs_own_folder_and_names_what_stays(tmp_path: Path) -> None:
    run_id = _ended_local_run()
    folder = Path(RunStore().get(run_id).paths.run_dir)  # type: ignore[union-attr]
    assert (folder / "checkpoints" / "w.bin").is_file()

    dry = trainctl("rm", "--dry-run", run_id)
    assert dry.returncode == 0 and f"would remove {run_id} (succeeded, local): {folder}" in dry.stdout, dry
    assert folder.is_dir() and RunStore().get(run_id) is not None

    gone = trainctl("rm", run_id, "--output", "json")
    assert gone.returncode == 0, gone.stderr
    found = json.loads(gone.stdout)
    assert found["runs"][0]["folders"] == [str(folder)] and found["runs"][0]["bytes"] >= 4096, found
    assert not folder.exists() and RunStore().get(run_id) is None
    assert trainctl("status", run_id).returncode == 2

    named = tmp_path / "my-checkpoints"  # a folder the job chose is not trainctl's to delete
    kept = _ended_local_run(checkpoint={"dir": str(named)})
    said = trainctl("rm", kept)
    assert said.returncode == 0 and f"stays: {named}" in said.stdout, said.stdout
    assert (named / "w.bin").is_file()


def test_other_targets_runs_are_forgotten_and_their_files_named() -> None:
    slurm = _recorded("slurm", "42-abc", "failed")
    said = trainctl("rm", slurm)
    assert said.returncode == 0, said.stderr
    assert "stays: /shared/runs/42-abc (on the slurm target's storage)" in said.stdout, said.stdout
    assert RunStore().get(slurm) is None


def test_refusals_remove_nothing() -> None:
    running = _recorded("slurm", "7-def", "running")
    trial = _recorded("slurm", "8-ghi", "succeeded", sweep="sweep:s1")
    ended = _recorded("slurm", "9-jkl", "succeeded")
    refused = trainctl("rm", ended, trial)
    assert refused.returncode == 2, refused
    assert "is a trial of sweep:s1: it goes with its sweep (`trainctl rm sweep:s1`)" in refused.stderr
    assert all(RunStore().get(r) is not None for r in (running, trial, ended))
    # a run recorded as running whose engine cannot be asked here stays running: cancel it first
    refused = trainctl("rm", running)
    assert refused.returncode == 2 and f"`trainctl cancel {running}`" in refused.stderr, refused.stderr


def test_prune_removes_ended_runs_older_than_the_age() -> None:
    day = 86400.0
    old = [_recorded("slurm", f"{n}-old", "succeeded", age_s=40 * day) for n in (1, 2)]
    new = _recorded("slurm", "3-new", "failed", age_s=day)
    trial = _recorded("slurm", "4-trial", "succeeded", age_s=40 * day, sweep="sweep:s2")
    unasked = trainctl("prune", "--older-than", "30d")  # no one can answer: nothing is removed
    assert unasked.returncode == 2 and "pass --yes" in unasked.stderr, unasked
    dry = trainctl("prune", "--older-than", "30d", "--dry-run")
    assert dry.returncode == 0 and "would remove 2 run(s)" in dry.stdout, dry.stdout
    assert all(RunStore().get(r) is not None for r in old)
    bad = trainctl("prune", "--older-than", "a month")
    assert bad.returncode == 2 and "--older-than" in bad.stderr
    done = trainctl("prune", "--older-than", "30d", "--yes", "--output", "json")
    assert done.returncode == 0, done.stderr
    assert sorted(r["id"] for r in json.loads(done.stdout)["runs"]) == sorted(old)
    assert [RunStore().get(r) is None for r in (*old, new, trial)] == [True, True, False, False]

"""Issue 22 on Kubernetes (the test API server, the Trainer/JobSet ports, the test kubelet): each submit is a
new TrainJob `<job>-<4 hex>` with its own folder `<pvc>/<job>/<object>/` on the shared PVC.

Two submissions of the same digits job (the second with another learning rate) both train from step 0 and
never see each other's checkpoints; `--resume-from` the first continues it (the new run's pods copy its
checkpoints on the PVC) and the trainer names the changed settings in its log. A `command:` job in the
pattern of pytorch/examples' multinode.py resumes its own snapshot after a retry (a JobSet restart) and
starts from epoch 0 on a second submission.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
import yaml
from k8s_testlib import REPO, Operators
from run_cli import cli  # tests/support
from trainctl import Job, RunState

pytestmark = [pytest.mark.kapi, pytest.mark.slow]
PROGRAM = REPO / "tests" / "programs" / "snapshot_ddp.py"


def run_to_end(ops: Operators, job: Job, **submit: Any) -> tuple[Any, str]:
    """Submit (recorded in the run store), run its pods with the Trainer port; (the run, its pods' log)."""
    run = job.submit("kubernetes", kubeconfig=str(ops.cluster.kubeconfig), **submit)
    name = run.native_id.partition("/")[2]
    assert name.startswith(f"{job.name}-") and len(name) == len(job.name) + 5, name
    ops.run("trainjob", name, timeout=400)
    log = "\n".join(run.logs())
    assert run.status().state is RunState.SUCCEEDED, every_attempt(ops, name)[-6000:]
    return run, log


def on_claim(ops: Operators, path: str) -> Path:
    return ops.claim() / Path(path).relative_to("/mnt/trainctl")


def digits(ops: Operators, lr: float, epochs: int = 2) -> Job:
    return Job.from_yaml(REPO / "examples" / "digits.yaml").with_overrides(
        [f"kubernetes.namespace={ops.ns}", f"trainer.lr={lr}", f"trainer.epochs={epochs}",
         "checkpoint.every_steps=10", "env.LOGLEVEL=INFO"]
    )  # fmt: skip


def test_two_runs_of_one_job_are_independent_and_resume_from_names_the_change(operators: Operators) -> None:
    shutil.copytree(REPO / "examples" / "data" / "digits", operators.claim() / "data" / "digits")
    runs = []
    for lr in (0.003, 0.01):
        run, log = run_to_end(operators, digits(operators, lr))
        assert "resumed from" not in log and "step 10/" in log, log[-3000:]
        summary = json.loads((on_claim(operators, run.paths.output_dir) / "summary.json").read_text())
        assert summary["resumed_from"] is None and run.paths.run_dir.startswith("/mnt/trainctl/digits/digits-")
        runs.append((run, summary, sorted(p.name for p in on_claim(operators, run.paths.checkpoint_dir).iterdir())))
    (a, first, a_steps), (b, second, b_steps) = runs
    assert a.paths.run_dir != b.paths.run_dir and a_steps == b_steps and first["val_loss"] != second["val_loss"]

    resumed, log = run_to_end(operators, digits(operators, 0.01, epochs=4), resume_from=a.id)
    came = resumed.resumed_from.model_dump()
    assert came["run"] == a.id and came["checkpoint"] == f"pvc://trainctl-checkpoints{a.paths.checkpoint_dir[13:]}"
    ours = resumed.paths.checkpoint_dir
    assert f"trainctl: copied the checkpoints of {a.paths.checkpoint_dir} into {ours}" in log, log[-3000:]
    newest = [s for s in a_steps if s.startswith("step-")][-1]
    assert f"resumed from {ours}/{newest} at step {first['steps']} " in log, log[-3000:]
    assert "settings changed since that checkpoint: epochs 2 -> 4, lr 0.003 -> 0.01" in log
    summary = json.loads((on_claim(operators, resumed.paths.output_dir) / "summary.json").read_text())
    assert summary["steps"] == 2 * first["steps"] and summary["val_accuracy"] > 0.8, summary
    assert sorted(on_claim(operators, a.paths.checkpoint_dir).iterdir()) != [], "the source is left as it was"
    shown = cli("status", resumed.id)
    assert (
        f"resumed from: {a.id} (pvc://" in shown.stdout and "the run's log names each changed setting" in shown.stdout
    )
    print(f"k8s: 2 runs from step 0 ({first['steps']} steps), resumed at {first['steps']} on the same PVC")


def test_a_snapshot_program_resumes_within_its_run_and_a_new_run_starts_fresh(
    operators: Operators, tmp_path: Path
) -> None:
    """The program ships as `code:` (a ConfigMap), is unpacked into the run's work/ on the PVC and runs there
    on 2 nodes; the runtime trainctl-torch-r1's JobSet restart (the operators' in-place restart, what `k8s
    apply` of `retries: 1` uses) finds the work/ folder as it was. (`submit` with `retries` makes each retry
    a new object with its own folder, seeded with the checkpoint folder only: test_retry_driver.py.)"""
    folder = tmp_path / "project"
    (folder / "src").mkdir(parents=True)
    shutil.copy(PROGRAM, folder / "src" / PROGRAM.name)
    data = {
        "name": "snapshots",
        "command": ["python", PROGRAM.name, "4", "1", "--fail-once-after", "2"],
        "code": "src",
        "resources": {"nodes": 2, "procs_per_node": 1},
        "kubernetes": {"namespace": operators.ns, "runtime": "trainctl-torch-r1"},
    }
    (folder / "job.yaml").write_text(yaml.safe_dump(data))
    works = []
    for _ in range(2):
        run, _ = run_to_end(operators, Job.from_yaml(folder / "job.yaml"))
        log = every_attempt(operators, run.native_id.partition("/")[2])
        work = run.paths.work_dir
        at = 0
        for line in (
            f"Epoch 1 | Training snapshot saved at {work}/snapshot.pt",
            "[rank0] failing on purpose after epoch 2",
            "[rank0] Resuming training from snapshot at Epoch 2",
            f"[rank0] trained epochs 2..4 in {work}",
        ):
            at = log.find(line, at)
            assert at >= 0, f"{line!r} missing or out of order:\n{log[-4000:]}"
        assert (on_claim(operators, work) / "snapshot.pt").is_file()
        works.append(work)
    assert works[0] != works[1]


def every_attempt(ops: Operators, name: str) -> str:
    """The logs of every pod the run had, in the order they started: a JobSet restart deletes the first
    attempt's pods (and the API server forgets their logs); the test kubelet keeps each pod's file."""
    folders = sorted((ops.runner.workdir / "pods").glob(f"{name}-*"), key=lambda p: p.stat().st_mtime_ns)
    return "\n".join((f / "log.txt").read_text() for f in folders if (f / "log.txt").is_file())


def test_a_repeated_object_name_starts_a_new_run_and_leaves_the_old_folder(
    operators: Operators, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 41: `<job>-<4 hex>` repeats (65,536 names a job); once the old object is deleted, a new run that draws
    its name gets a folder of its own (`<object>-<run uid>`), starts from step 0, and the old folder is untouched."""
    import random

    from trainctl.targets.kubernetes import engine

    shutil.copytree(REPO / "examples" / "data" / "digits", operators.claim() / "data" / "digits")
    monkeypatch.setattr(engine, "NAME_TOKENS", random.Random(41))
    first, _ = run_to_end(operators, digits(operators, 0.003, epochs=1))
    old = on_claim(operators, first.paths.run_dir)
    before = {p: p.stat().st_mtime_ns for p in old.rglob("*")}
    assert (old / "run-uid").read_text().strip() == first.run_uid and any(old.glob("checkpoints/step-*"))
    name = first.native_id.partition("/")[2]
    operators.cluster.custom.delete_namespaced_custom_object(
        "trainer.kubeflow.org", "v1alpha1", operators.ns, "trainjobs", name
    )
    monkeypatch.setattr(engine, "NAME_TOKENS", random.Random(41))  # the same name again
    second, log = run_to_end(operators, digits(operators, 0.01, epochs=1))
    assert second.native_id == first.native_id and second.run_uid != first.run_uid
    assert second.paths.run_dir == f"/mnt/trainctl/digits/{name}-{second.run_uid}" != first.paths.run_dir
    assert "resumed from" not in log and "step 10/" in log, log[-3000:]
    assert {p: p.stat().st_mtime_ns for p in old.rglob("*")} == before, "the old run's folder is untouched"

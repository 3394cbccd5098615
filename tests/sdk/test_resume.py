"""`--resume-from` on the local target (issue 18): a killed 2-process digits run continues at 4 processes
(every remaining sample of the epoch once, accuracy > 0.9, lineage in `trainctl status`); the refusals
(another model, nothing verifies, a target that cannot receive it) exit 2 and submit nothing."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from trainctl import Job
from trainctl.runs.state import Paths, RunRef
from trainctl.runs.store import RunStore

pytestmark = pytest.mark.slow


def trainctl(*args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(Path(sys.executable).parent / "trainctl"), *args], capture_output=True, text=True,
                          timeout=timeout)  # fmt: skip


def _job_file(tmp_path: Path, data: dict[str, Any]) -> Path:
    import yaml

    path = tmp_path / f"{data['name']}.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def test_killed_two_process_run_resumes_at_four_processes(
    digits_data: Path, tmp_path: Path, resume_helpers: Any, killed_source: Any
) -> None:
    first = killed_source.trace
    source = killed_source.recorded()
    trace = tmp_path / "trace"
    job = resume_helpers.job(digits_data, "resumed", 4, env={"TRAINER_SAMPLE_TRACE": str(trace)})
    done = trainctl("submit", str(_job_file(tmp_path, job)), "--target", "local", "--resume-from", source.id,
                    "--wait", "--output", "json")  # fmt: skip
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    outcome = json.loads(done.stdout)
    assert outcome["summary"]["world_size"] == 4 and outcome["summary"]["val_accuracy"] > 0.9, outcome

    came = RunStore().get(outcome["id"]).resumed_from.model_dump()  # type: ignore[union-attr]
    step = came["step"]
    assert came["run"] == source.id and came["checkpoint"].endswith(f"step-{step:08d}")
    log = (Path(RunStore().get(outcome["id"]).paths.log)).read_text()  # type: ignore[union-attr]
    assert f"at step {step} " in log, log[-2000:]

    # the resumed epoch: what the killed run trained before the checkpoint + what the 4 ranks trained
    # after it = every training sample once (the order is a function of seed, epoch and position)
    def rows(folder: Path, ranks: int) -> list[dict[str, Any]]:
        files = [folder / f"rank-{rank}.jsonl" for rank in range(ranks)]
        return [json.loads(line) for file in files for line in file.read_text().splitlines()]

    resumed = rows(trace, 4)
    epoch = min(r["epoch"] for r in resumed)
    before = [i for r in rows(first, 2) if r["epoch"] == epoch and r["step"] < step for i in r["ids"]]
    after = [i for r in resumed if r["epoch"] == epoch for i in r["ids"]]
    n_train = sum(1 for _ in (digits_data / "train.jsonl").open())
    assert len(before) == len(set(before))
    assert set(before) | set(after) == set(range(n_train)), "a sample of the epoch was never trained"
    assert len(set(after) - set(before)) == n_train - len(before)
    padding = len(after) - (n_train - len(before))  # the last round padded from the epoch's head
    assert 0 <= padding < 4 and len(after) - len(set(after)) <= padding, padding
    acc = outcome["summary"]["val_accuracy"]
    print(
        f"resume 2->4: step {step}, epoch {epoch}: {len(before)} before + {len(after)} after (padding {padding}); acc {acc:.4f}"
    )
    status = trainctl("status", outcome["id"])
    assert f"resumed from: {source.id} step {step}" in status.stdout, status.stdout
    as_json = json.loads(trainctl("status", outcome["id"], "--output", "json").stdout)
    assert as_json["resumed_from"]["run"] == source.id and as_json["resumed_from"]["step"] == step


def test_refusals_exit_2_and_submit_nothing(
    digits_data: Path, tmp_path: Path, resume_helpers: Any, killed_source: Any
) -> None:
    source = killed_source.recorded()
    newest = sorted(Path(source.paths.checkpoint_dir).glob("step-*"))[-1]

    # a checkpoint whose meta.json says another model wrote it
    other = tmp_path / "other" / newest.name
    shutil.copytree(newest, other)
    meta = json.loads((other / "meta.json").read_text())
    (other / "meta.json").write_text(json.dumps({**meta, "model": "resnet50"}))
    RunStore().record(RunRef(target="local", native_id="other-model", paths=Paths(checkpoint_dir=str(other.parent))))
    # nothing verifies: a state.pt cut short
    broken = tmp_path / "broken" / newest.name
    shutil.copytree(newest, broken)
    with (broken / "state.pt").open("r+b") as fh:
        fh.truncate(100)
    RunStore().record(RunRef(target="local", native_id="broken", paths=Paths(checkpoint_dir=str(broken.parent))))
    # a Kubernetes run: its checkpoints are on a PVC, which only a pod can read
    RunStore().record(RunRef(target="kubernetes", native_id="ml/trainjob/src-1", job_name="src"))

    job_file = _job_file(tmp_path, resume_helpers.job(digits_data, "again", 2))
    before = len(RunStore().list())
    cases = {
        "local:other-model": "was written by model 'resnet50', but this run trains 'digits'",
        "local:broken": "no checkpoint that verifies",
        "local:nope": "no such run",
        "kubernetes:ml/trainjob/src-1": "kubectl cp from a pod that mounts it",
    }
    for run_id, reason in cases.items():
        done = trainctl("submit", str(job_file), "--target", "local", "--resume-from", run_id)
        assert done.returncode == 2 and reason in done.stderr, (run_id, done.stderr)
    # the new run's checkpoint folder already holds checkpoints; checkpoint.resume: never
    full = resume_helpers.job(digits_data, "again", 2, checkpoint={"dir": source.paths.checkpoint_dir})
    never = resume_helpers.job(digits_data, "again", 2, checkpoint={"resume": "never"})
    for data, reason in ((full, "already holds checkpoints"), (never, "checkpoint.resume: got 'never'")):
        done = trainctl("submit", str(_job_file(tmp_path, data)), "--target", "local", "--resume-from", source.id)
        assert done.returncode == 2 and reason in done.stderr, done.stderr
    k8s = dict(resume_helpers.job(digits_data, "again", 2), image="trainer:1", kubernetes={"namespace": "ml"})
    done = trainctl("submit", str(_job_file(tmp_path, k8s)), "--target", "kubernetes", "--resume-from", source.id)
    assert done.returncode == 2 and "kubectl cp" in done.stderr, done.stderr
    assert len(RunStore().list()) == before, "a refused --resume-from submitted a run"


def test_command_job_checkpoint_folder_moves_as_opaque_files(tmp_path: Path) -> None:
    program = "import os,pathlib,sys; d=pathlib.Path(os.environ['TRAINER_CHECKPOINT_DIR']); "
    program += "print('found', sorted(p.name for p in d.iterdir())); (d/'mine.bin').write_bytes(b'x'*10)"
    first = Job.parse({"name": "cmd", "command": ["python", "-c", program]}).submit("local")
    assert first.wait(timeout=120, poll=0.2).state.value == "succeeded"
    second = Job.parse({"name": "cmd", "command": ["python", "-c", program]}).submit("local", resume_from=first)
    assert second.wait(timeout=120, poll=0.2).state.value == "succeeded"
    assert "found ['mine.bin']" in "\n".join(second.logs())
    assert second.resumed_from.run == first.id
    own = Path(second.paths.run_dir) / "checkpoints"  # issue 37: not a folder outside the run's own
    assert second.paths.checkpoint_dir == str(own) and (own / "mine.bin").is_file()


def test_changed_settings_are_named_and_a_breaking_change_is_refused(
    digits_data: Path, tmp_path: Path, resume_helpers: Any, killed_source: Any
) -> None:
    """--resume-from with another learning rate and more epochs: submit, the trainer's log and `status` name
    both changes; another optimizer (its saved state would not fit) is refused at submit with exit 2."""
    source = killed_source.recorded()
    changed = resume_helpers.job(digits_data, "changed", 2)
    changed["trainer"] = {**changed["trainer"], "lr": 0.01, "epochs": 7}
    done = trainctl("submit", str(_job_file(tmp_path, changed)), "--resume-from", source.id, "--wait")
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    named = "epochs 6 -> 7, lr 0.003 -> 0.01"
    assert f"changed since that checkpoint: {named}" in done.stderr
    assert f"settings changed since that checkpoint: {named}" in done.stdout  # the trainer's own log line
    run_id = done.stderr.split("submitted ", 1)[1].split()[0]
    assert f"changed since that checkpoint: {named}" in trainctl("status", run_id).stdout
    assert RunStore().get(run_id).resumed_from.changes == named.split(", ")  # type: ignore[union-attr]

    before = len(RunStore().list())
    sgd = resume_helpers.job(digits_data, "sgd", 2)
    sgd["trainer"] = {**sgd["trainer"], "optimizer": "sgd"}
    done = trainctl("submit", str(_job_file(tmp_path, sgd)), "--resume-from", source.id)
    assert done.returncode == 2 and "cannot continue with optimizer adamw -> sgd" in done.stderr, done.stderr
    assert len(RunStore().list()) == before

"""`trainctl pull` on the local target (issue 37 §2): a finished digits run's output folder, its final model with
it (which `trainctl status` names), copied into a new folder; a folder in use is refused; a target that cannot copy says where the output is.
SLURM's pull runs in tests/slurm/test_e2e.py, SageMaker's in tests/sagemaker (S3 on moto, and local mode)."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from run_cli import trainctl  # tests/support
from trainctl import Job
from trainctl.runs.state import Paths, RunRef
from trainctl.runs.store import RunStore


def test_pull_copies_a_finished_runs_output_and_model(digits_data: Path, tmp_path: Path) -> None:
    job = {"name": "pull-me", "trainer": {"model": "digits", "epochs": 1, "batch_size": 64},
           "resources": {"procs_per_node": 2},
           "data": {"train": str(digits_data / "train.jsonl"), "val": str(digits_data / "val.jsonl")}}  # fmt: skip
    run = Job.parse(job).submit("local")
    assert run.wait(timeout=180, poll=0.5).state.value == "succeeded", "\n".join(run.logs())[-3000:]
    model = Path(run.paths.output_dir or "") / "model.safetensors"
    status = trainctl("status", run.id)  # a finished run names its final model (summary.json's `model`)
    assert f"  final model: {model} (`trainctl pull {run.id}` copies the output here)" in status.stdout, status
    assert json.loads(trainctl("status", run.id, "--output", "json").stdout)["final_model"] == str(model)

    shown = trainctl("pull", run.id, cwd=tmp_path)  # default folder: ./local-<id>
    assert shown.returncode == 0, shown.stderr
    folder = tmp_path / f"local-{run.native_id}"
    meta = json.loads((folder / "model.json").read_text())
    assert hashlib.sha256((folder / meta["file"]).read_bytes()).hexdigest() == meta["sha256"]
    assert {"summary.json", "metrics.jsonl", "model.safetensors"} <= {p.name for p in folder.iterdir()}
    assert f"model: {folder / 'model.safetensors'} (digits, step {meta['step']})" in shown.stdout, shown.stdout

    again = trainctl("pull", run.id, str(folder))
    assert again.returncode == 2 and "not an empty folder" in again.stderr, again.stderr


def test_a_kubernetes_run_without_a_pvc_says_its_output_went_with_its_pods(tmp_path: Path) -> None:
    """Without `kubernetes.pvc` the output was on the pods' emptyDir: pull says so (and what to set) before any
    reader pod starts (tests/kubernetes/test_pull_k8s.py pulls from a PVC)."""
    ref = RunRef(target="kubernetes", native_id="team/digits-1a2b", job_name="digits",
                 paths=Paths(output_dir="/mnt/trainctl/digits/digits-1a2b-u/output"))  # fmt: skip
    RunStore().record(ref, "succeeded")
    said = trainctl("pull", ref.id, str(tmp_path / "here"))
    assert said.returncode == 1, said
    assert "its output folder /mnt/trainctl/digits/digits-1a2b-u/output was on its pods' emptyDir" in said.stderr, said
    assert "set kubernetes.pvc (or output_dir: s3://...)" in said.stderr, said
    assert not (tmp_path / "here").exists()

"""slurm.container: podman on the real local cluster: srun starts one container of the trainer image
per node (tests/conftest.py builds it), the launcher inside reads SLURM's variables, and digits
trains across 2 nodes as user 10001 on a read-only root; an image missing on the node fails the
job with podman's words and what to do."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path
from typing import Any

import pytest
from run_cli import cli  # tests/support
from trainctl import Job, RunState
from trainctl.targets.slurm import engine as slurm_engine

pytestmark = [pytest.mark.slurm, pytest.mark.slow]
ROOT = Path(__file__).resolve().parents[2]


def _job(image: str, workdir: Path) -> Any:
    return Job.from_yaml(ROOT / "examples/digits.yaml").with_overrides(
        [f"image={image}", "slurm.container=podman", f"slurm.workdir={workdir}", "resources.nodes=2"]
    )


def test_digits_on_two_nodes_in_the_image(cluster: object, trainer_image: Any, tmp_path: Path, home: Path) -> None:
    workdir = tmp_path / "w"
    run = _job(trainer_image.ref, workdir).submit("slurm")
    final = slurm_engine.wait_for(run, timeout=400, poll=1.0)
    log = "\n".join(run.logs())
    assert final.state is RunState.SUCCEEDED, log[-4000:]
    assert f"id {trainer_image.id}" in log, "the run's log records the image id"
    # each node printed the ID of the image its podman holds; status reads them back: one image, this one
    ids = final.images.ids
    assert sorted(ids) == ["n1", "n2"] and set(ids.values()) == {trainer_image.id}, final.details
    assert final.images.same == trainer_image.id and final.images.warning is None
    shown = cli("status", run.id)
    line = f"  image ID: {trainer_image.id} (all of {', '.join(sorted(ids))})"
    assert shown.exit_code == 0 and line in shown.stdout.splitlines(), shown.stdout
    assert "platform slurm: 2 node(s) x 2 process(es)" in log or "2 node(s) x 2 process(es)" in log
    output = Path(run.paths.output_dir)
    assert output == workdir / "runs" / f"{run.native_id}-{run.run_uid}" / "output"
    summary = json.loads((output / "summary.json").read_text())
    assert summary["world_size"] == 4 and summary["val_accuracy"] > 0.9, summary
    assert {p.stat().st_uid for p in output.iterdir()} == {10001}, "written by the image's user"
    left = subprocess.run(
        [trainer_image.runtime, "ps", "-a", "-q", "--filter", f"label=io.trainctl.slurm-job={run.native_id}"],
        capture_output=True,
        text=True,
    )
    assert left.stdout.strip() == "", "one --rm container per node, gone after the job"
    print(f"slurm container: image {trainer_image.id[:12]} val_accuracy {summary['val_accuracy']:.4f}; status: {ids}")


def test_srun_mode_runs_one_container_per_task(cluster: object, trainer_image: Any, tmp_path: Path, home: Path) -> None:
    """slurm.launch: srun with podman: a `podman run` per task (2 nodes x 2), each launcher taking its rank from
    SLURM's variables (passed in by `--env='SLURM_*'`), digits trained as user 10001."""
    workdir = tmp_path / "w"
    run = _job(trainer_image.ref, workdir).with_overrides(["slurm.launch=srun"]).submit("slurm")
    final = slurm_engine.wait_for(run, timeout=400, poll=1.0)
    log = "\n".join(run.logs())
    assert final.state is RunState.SUCCEEDED, log[-4000:]
    assert sorted(re.findall(r"srun task rank (\d) of 4", log)) == ["0", "1", "2", "3"], log[-4000:]
    summary = json.loads((Path(run.paths.output_dir) / "summary.json").read_text())
    assert summary["world_size"] == 4 and summary["val_accuracy"] > 0.9, summary
    left = subprocess.run(
        [trainer_image.runtime, "ps", "-a", "-q", "--filter", f"label=io.trainctl.slurm-job={run.native_id}"],
        capture_output=True,
        text=True,
    )
    assert left.stdout.strip() == "", "one --rm container per task, gone after the job"


def test_image_missing_on_the_node(cluster: object, trainer_image: Any, tmp_path: Path, home: Path) -> None:
    run = _job("localhost/trainctl-nothing:0", tmp_path / "w").submit("slurm")
    final = slurm_engine.wait_for(run, timeout=120, poll=0.5)
    log = "\n".join(run.logs())
    assert final.state is RunState.FAILED, log
    assert "image not known" in log, "podman's own words"
    assert "podman has no image localhost/trainctl-nothing:0 here: build it" in log
    assert re.search(r"^trainctl: node n[12]: podman has no image", log, re.MULTILINE), "the node says which"
    assert "trainer-launch:" not in log and (final.images is None or final.images.same is None), "no launcher started"


def test_code_job_on_two_nodes_in_the_image(cluster: object, trainer_image: Any, tmp_path: Path, home: Path) -> None:
    """code: with podman: each node's container gets the bundle's variables, the first launcher unpacks
    it into the run's work/ folder as 10001, and train.py (importing helper.py) runs 2 nodes x 2 there."""
    import shutil

    from trainctl.submit.bundle import bundle_for

    folder = tmp_path / "code-job"
    shutil.copytree(ROOT / "examples" / "code-job", folder)
    workdir = tmp_path / "w"
    job = Job.from_yaml(folder / "job.yaml").with_overrides(
        [f"image={trainer_image.ref}", "slurm.container=podman", f"slurm.workdir={workdir}", "resources.nodes=2"]
    )
    bundle = bundle_for(job)
    assert bundle is not None
    run = job.submit("slurm")
    final = slurm_engine.wait_for(run, timeout=400, poll=1.0)
    log = "\n".join(run.logs())
    assert final.state is RunState.SUCCEEDED, log[-4000:]
    assert log.count(f"code sha256 {bundle.sha256} verified") == 2, log[-4000:]  # one launcher per node
    run_dir = workdir / "runs" / f"{run.native_id}-{run.run_uid}"
    result = json.loads((run_dir / "output" / "result.json").read_text())
    unpacked = run_dir / "work"
    assert result["greeting"] == "hello from helper.py" and result["world_size"] == 4, result
    assert result["code_dir"] == str(unpacked) and result["code_sha256"] == bundle.sha256
    assert unpacked.stat().st_uid == 10001 and (run_dir / "output" / "result.json").stat().st_uid == 10001
    print(f"slurm container code job: world {result['world_size']}, code sha256 {bundle.sha256[:12]} verified")

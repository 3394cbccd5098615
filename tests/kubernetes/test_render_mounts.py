"""An absolute data path no volume of the pods provides is a warning (issue 37): `--target kubernetes --set
data.train=/data/train.jsonl` validated, yet nothing is mounted at /data in the rendered TrainJob."""

from __future__ import annotations

from typing import Any

import pytest
import yaml
from k8s_testlib import REPO
from run_cli import cli  # tests/support
from trainctl import Job
from trainctl.targets.kubernetes.mounts import mounted, unmounted_inputs

PVC_DATA = {"train": "pvc://datasets/sft/train.jsonl", "val": "pvc://trainctl-checkpoints/val.jsonl"}


def _job(data: dict[str, str], **kubernetes: Any) -> Job:
    return Job(name="m", trainer={"model": "digits"}, data=data, kubernetes=kubernetes)


def _mount_paths(value: Any) -> set[str]:
    """Every volumeMount's mountPath in a manifest, wherever its API puts the container."""
    if isinstance(value, dict):
        found = {value["mountPath"]} if isinstance(value.get("mountPath"), str) else set()
        return found.union(*(_mount_paths(v) for v in value.values()))
    if isinstance(value, list):
        return set().union(*(_mount_paths(v) for v in value))
    return set()


@pytest.mark.parametrize("api", ["trainjob", "pytorchjob"])
@pytest.mark.parametrize(
    ("data", "pvc"),
    [({"train": "/data/train.jsonl"}, "trainctl-checkpoints"), (PVC_DATA, "trainctl-checkpoints"),
     ({"train": "/data/train.jsonl"}, None), ({"train": "pvc://other/t.jsonl"}, None)],
)  # fmt: skip
def test_the_mounts_are_the_rendered_manifests(api: str, data: dict[str, str], pvc: str | None) -> None:
    """A PyTorchJob mounts all; a TrainJob its PVCs, on top of its ClusterTrainingRuntime's (k8s/)."""
    job = _job(data, api=api, pvc=pvc)
    rendered = _mount_paths(job.render("kubernetes").native)
    if api == "trainjob":
        runtimes = yaml.safe_load_all((REPO / "k8s" / "trainingruntimes.yaml").read_text())
        rendered |= _mount_paths([r for r in runtimes if r and r.get("kind") == "ClusterTrainingRuntime"])
    assert set(mounted(job)) == rendered


def test_an_absolute_path_on_no_pvc_is_said_and_one_on_a_pvc_is_not() -> None:
    (image,) = unmounted_inputs(_job({"train": "/data/train.jsonl"}))
    assert image.startswith(
        "data.train: /data/train.jsonl: no volume of the pod holds it, so it is read from the image"
    )
    assert "pvc://trainctl-checkpoints/<path> (the PVC is mounted at /mnt/trainctl)" in image
    (scratch,) = unmounted_inputs(_job({"train": "/workspace/t.jsonl"}, pvc=None))
    assert "it is on empty scratch space, which holds nothing when the trainer starts" in scratch
    assert "pvc://<claim>/<path>" in scratch
    on_pvc = {"train": "/mnt/trainctl/d/train.jsonl", "val": "file:///mnt/pvc/datasets/v.jsonl", "x": PVC_DATA["train"]}
    assert unmounted_inputs(_job(on_pvc)) == []  # /mnt/pvc/datasets is mounted for data.x
    trainer_own = Job(name="m", trainer={"train_data": "/opt/corpus.jsonl"}, kubernetes={})
    assert [w.split(":")[0] for w in unmounted_inputs(trainer_own)] == ["trainer.train_data"]


@pytest.mark.parametrize("command", ["validate", "render"])
def test_validate_and_render_warn(command: str, tmp_path: Any) -> None:
    path = tmp_path / "job.yaml"
    path.write_text("name: m\ntrainer: {model: digits}\ndata: {train: data/train.jsonl}\n")
    result = cli(command, str(path), "-t", "kubernetes", "--set", "data.train=/data/train.jsonl")
    assert result.exit_code == 0, result.stdout + result.stderr
    assert "warning: data.train: /data/train.jsonl: no volume of the pod holds it" in result.stderr
    result = cli(command, str(path), "-t", "kubernetes")
    assert result.exit_code == 0 and "warning" not in result.stderr

"""`trainctl k8s ...` end to end against kapi: the issue's "done when" (apply the example, status, logs, delete)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from k8s_testlib import REPO, assert_valid
from operator_sim import Operator
from trainctl.cli import app
from typer.testing import CliRunner

EXAMPLE = str(REPO / "examples" / "digits.yaml")
runner = CliRunner()


def _invoke(*args: str) -> tuple[int, str, str]:
    result = runner.invoke(app, ["k8s", *args])
    return result.exit_code, result.stdout, result.stderr


def test_render_prints_a_valid_manifest() -> None:
    code, out, err = _invoke("render", EXAMPLE, "-n", "team-x", "--set", "resources.nodes=2")
    assert code == 0, err
    manifest = yaml.safe_load(out)
    assert manifest["metadata"]["namespace"] == "team-x"
    assert manifest["spec"]["pytorchReplicaSpecs"]["Worker"]["replicas"] == 2
    assert_valid(manifest)
    assert "needs PersistentVolumeClaim" in err


def test_render_invalid_job_exits_2_naming_the_field() -> None:
    code, _, err = _invoke("render", EXAMPLE, "--set", "data.train=s3://bucket/train.jsonl")
    assert code == 2
    assert "data.train" in err and "pvc://" in err


@pytest.mark.kapi
def test_apply_status_logs_delete_list(kubeconfig: Path) -> None:
    code, out, err = _invoke("apply", EXAMPLE, "-n", "cli")
    assert code == 0, err
    assert out.strip() == "pytorchjob.kubeflow.org/digits created: kubernetes:cli/digits"
    code, out, _ = _invoke("apply", EXAMPLE, "-n", "cli")
    assert "digits unchanged" in out
    code, out, _ = _invoke("apply", EXAMPLE, "-n", "cli", "--dry-run", "--set", "trainer.epochs=3")
    assert code == 0 and "digits updated (server dry run)" in out

    code, out, _ = _invoke("list", "-n", "cli")
    assert code == 0 and out.splitlines()[1].split()[:3] == ["digits", "queued", "Pending"]

    op = Operator(str(kubeconfig), "cli")
    op.add_condition("digits", "Created", "PyTorchJobCreated", "created")
    pod = op.create_pod("digits", "Worker", 0, log="epoch 1 loss 2.30\nepoch 2 loss 1.10\n", phase="Running")
    op.add_condition("digits", "Running", "PyTorchJobRunning", "PyTorchJob digits is running.")
    code, out, _ = _invoke("status", "digits", "-n", "cli")
    assert code == 0
    assert out.splitlines() == [
        "kubernetes:cli/digits  running (Running)",
        "  reason: PyTorchJobRunning: PyTorchJob digits is running.",
        "  Worker-0: Running",
    ]
    # The generic commands find the run through the registry the apply recorded it in.
    generic = runner.invoke(app, ["status", "kubernetes:cli/digits", "--output", "json"])
    assert generic.exit_code == 0 and '"state": "running"' in generic.stdout

    op.set_phase(pod, "Succeeded")
    op.add_condition("digits", "Succeeded", "PyTorchJobSucceeded", "done")
    code, out, _ = _invoke("logs", "digits", "-n", "cli", "--follow")
    assert code == 0 and out.splitlines() == ["[rank 0] epoch 1 loss 2.30", "[rank 0] epoch 2 loss 1.10"]
    code, out, _ = _invoke("logs", "digits", "-n", "cli", "--rank", "0")
    assert out.splitlines()[0] == "[rank 0] epoch 1 loss 2.30"

    code, out, _ = _invoke("delete", "digits", "-n", "cli")
    assert code == 0 and out.strip() == "pytorchjob.kubeflow.org/digits deleted"
    code, _, err = _invoke("delete", "digits", "-n", "cli")
    assert code == 1 and "404 Not Found" in err
    code, out, _ = _invoke("list", "-n", "cli")
    assert out.strip() == "no PyTorchJobs"


@pytest.mark.kapi
def test_bad_context_is_a_clear_error(kubeconfig: Path) -> None:
    code, _, err = _invoke("status", "digits", "--context", "nope")
    assert code == 1 and "cannot load the kubeconfig context 'nope'" in err

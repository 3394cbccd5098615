"""`trainctl k8s ...` end to end against kapi: the issue's "done when" (apply the example, status, logs, delete)."""

from __future__ import annotations

import json
import re
import shutil
import threading
import time
from pathlib import Path

import pytest
import yaml
from k8s_testlib import REPO, Operators, assert_valid
from run_cli import cli, cli_says  # tests/support

EXAMPLE = str(REPO / "examples" / "digits.yaml")


def test_render_prints_a_valid_manifest() -> None:
    code, out, err = cli_says("k8s", "render", EXAMPLE, "-n", "team-x", "--set", "resources.nodes=2")
    assert code == 0, err
    manifest = yaml.safe_load(out)
    assert manifest["kind"] == "TrainJob" and manifest["metadata"]["namespace"] == "team-x"
    assert manifest["spec"]["trainer"]["numNodes"] == 2
    assert_valid(manifest)
    assert "needs PersistentVolumeClaim" in err and "ClusterTrainingRuntime 'trainctl-torch-r0'" in err


def test_render_invalid_job_exits_2_naming_the_field() -> None:
    code, _, err = cli_says("k8s", "render", EXAMPLE, "--set", "data.train=pvc://Bad_Claim/train.jsonl")
    assert code == 2
    assert "data.train" in err and "pvc://" in err


def test_what_a_trainjob_cannot_say_exits_2_naming_the_field_and_the_alternative() -> None:
    code, _, err = cli_says("k8s", "render", EXAMPLE, "--set", "kubernetes.priority_class=high")
    assert code == 2 and "kubernetes.priority_class" in err and "kubernetes.api: pytorchjob" in err
    code, out, err = cli_says(
        "k8s", "render", EXAMPLE, "--set", "kubernetes.priority_class=high", "--set", "kubernetes.api=pytorchjob"
    )
    assert code == 0 and "priorityClassName: high" in out


@pytest.mark.kapi
def test_apply_status_logs_delete_list_one_node_trained_by_the_trainer_port(
    kubeconfig: Path, operators: Operators, tmp_path: Path
) -> None:
    """The example (1 node x 2 processes) as a user runs it: apply, then the Trainer port runs its pods."""
    ns = operators.ns
    shutil.copytree(REPO / "examples" / "data" / "digits", operators.claim() / "data" / "digits")
    code, out, err = cli_says("k8s", "apply", EXAMPLE, "-n", ns, "--set", "env.LOGLEVEL=INFO")
    assert code == 0, err
    assert out.strip() == f"trainjob.trainer.kubeflow.org/digits created: kubernetes:{ns}/digits"
    code, out, _ = cli_says("k8s", "apply", EXAMPLE, "-n", ns, "--set", "env.LOGLEVEL=INFO")
    assert "digits unchanged" in out
    code, out, err = cli_says("k8s", "apply", EXAMPLE, "-n", ns, "--dry-run", "--set", "trainer.epochs=3")
    assert code == 1 and "spec.trainer: Invalid value: field is immutable" in err
    assert f"trainctl k8s delete digits -n {ns}" in err
    code, out, _ = cli_says(
        "k8s",
        "apply",
        EXAMPLE,
        "-n",
        ns,
        "--dry-run",
        "--set",
        "env.LOGLEVEL=INFO",
        "--set",
        "kubernetes.labels.team=a",
    )
    assert code == 0 and "digits updated (server dry run)" in out

    code, out, _ = cli_says("k8s", "list", "-n", ns)
    assert code == 0 and out.splitlines()[1].split()[:4] == ["digits", "TrainJob", "queued", "Pending"]

    result: dict[str, object] = {}
    worker = threading.Thread(target=lambda: result.update(final=operators.run("trainjob", "digits")[0]))
    worker.start()
    seen = set()
    while worker.is_alive():
        code, out, _ = cli_says("k8s", "status", "digits", "-n", ns)
        seen.add(out.splitlines()[0] if out else "")
        time.sleep(1)
    worker.join()
    assert f"kubernetes:{ns}/digits  running (Running)" in seen, seen
    code, out, _ = cli_says("k8s", "status", "digits", "-n", ns)
    assert code == 0
    lines = out.splitlines()
    assert lines[0] == f"kubernetes:{ns}/digits  succeeded (Complete)"
    assert lines[1] == "  reason: AllJobsCompleted: jobset completed successfully"
    assert lines[2] == "  node-0: Succeeded"
    # process pods run no image: their kubelet reports no image ID, and status says so
    assert re.fullmatch(r"  image ID: no image ID reported \(digits-node-0-0-\w+\)", lines[3]), lines
    # The generic commands find the run through the registry the apply recorded it in.
    generic = cli("status", f"kubernetes:{ns}/digits", "--output", "json")
    assert generic.exit_code == 0 and '"state": "succeeded"' in generic.stdout

    code, out, _ = cli_says("k8s", "logs", "digits", "-n", ns, "--follow")
    assert code == 0 and "[rank 0] trainer-launch: platform kubeflow: 1 node(s) x 2 process(es)" in out
    assert any(re.match(r"\[rank 0\] .*group_rank=0", line) for line in out.splitlines())
    summary = json.loads((operators.claim() / "digits" / "digits" / "output" / "summary.json").read_text())
    assert summary["world_size"] == 2 and summary["val_accuracy"] > 0.9

    code, out, _ = cli_says("k8s", "delete", "digits", "-n", ns)
    assert code == 0 and out.strip() == "digits deleted"
    code, _, err = cli_says("k8s", "delete", "digits", "-n", ns)
    assert code == 1 and "404 Not Found" in err
    code, out, _ = cli_says("k8s", "list", "-n", ns)
    assert out.strip() == "no TrainJobs or PyTorchJobs"


@pytest.mark.kapi
def test_bad_context_is_a_clear_error(kubeconfig: Path) -> None:
    code, _, err = cli_says("k8s", "status", "digits", "--context", "nope")
    assert code == 1 and "cannot load the kubeconfig context 'nope'" in err

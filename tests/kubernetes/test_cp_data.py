"""`trainctl k8s cp-data JOB` (issue 27 finding 16): the job's relative data onto its PVC, as its pods read it.

Against the real test API server (kapi) with the test kubelet (pod_runner.py) running the copy pod: the
archive travels in ConfigMaps, the pod unpacks it into the claim, then pod and ConfigMaps are gone. Too much
data for ConfigMaps, or `--print`: the kubectl commands instead, whose pod passes strict validation and Pod
Security "restricted".
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from k8s_testlib import REPO, Operators, helper_pods_run, pod_template_errors
from port_pss import violations
from run_cli import cli_says  # tests/support
from trainctl.targets.kubernetes import data_copy

DIGITS = REPO / "examples" / "data" / "digits"


def _project(tmp_path: Path) -> Path:
    """A job file whose data are two files and a folder, relative to it, as a user's project holds them."""
    folder = tmp_path / "project"
    shutil.copytree(DIGITS, folder / "data" / "digits")
    (folder / "vocab" / "sub").mkdir(parents=True)
    (folder / "vocab" / "words.txt").write_text("alpha\nbeta\n")
    (folder / "vocab" / "sub" / "more.txt").write_text("gamma\n")
    job = yaml.safe_load((REPO / "examples" / "digits.yaml").read_text())
    job["data"]["vocab"] = "./vocab"
    (folder / "digits.yaml").write_text(yaml.safe_dump(job))
    return folder / "digits.yaml"


@pytest.fixture
def kubelet(operators: Operators) -> Iterator[list[dict[str, Any]]]:
    """The test kubelet for copy pods: runs each one the API server holds, once; yields the pods it ran."""
    with helper_pods_run(operators, data_copy.LABEL) as ran:
        yield ran


def _leftovers(operators: Operators) -> list[str]:
    core, ns = operators.cluster.core, operators.ns
    pods = core.list_namespaced_pod(ns, label_selector=data_copy.LABEL).items
    maps = core.list_namespaced_config_map(ns, label_selector=data_copy.LABEL).items
    return [f"pod/{p.metadata.name}" for p in pods] + [f"configmap/{m.metadata.name}" for m in maps]


@pytest.mark.kapi
@pytest.mark.parametrize("part_bytes", [data_copy.PART_BYTES, 64 * 1024], ids=["one-part", "many-parts"])
def test_cp_data_puts_the_jobs_data_where_its_pods_read_it(
    kubeconfig: Path, operators: Operators, kubelet: list[dict[str, Any]], tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch, part_bytes: int,
) -> None:  # fmt: skip
    monkeypatch.setattr(data_copy, "PART_BYTES", part_bytes)
    job_file = _project(tmp_path)
    code, out, err = cli_says("k8s", "cp-data", str(job_file), "-n", operators.ns)
    assert code == 0, out + err
    claim = operators.claim()
    for split in ("train", "val"):
        assert (claim / "data" / "digits" / f"{split}.jsonl").read_bytes() == (DIGITS / f"{split}.jsonl").read_bytes()
        assert f"copied data.{split}: data/digits/{split}.jsonl -> PVC trainctl-checkpoints:/mnt/trainctl/data/" in out
    assert (claim / "vocab" / "words.txt").read_text() == "alpha\nbeta\n"
    assert (claim / "vocab" / "sub" / "more.txt").read_text() == "gamma\n"
    (pod,) = kubelet
    parts = [v for v in pod["spec"]["volumes"] if "configMap" in v]
    assert len(parts) >= (2 if part_bytes < 100_000 else 1) and f"{len(parts)} part(s)" in err
    assert _leftovers(operators) == []  # the pod and its ConfigMaps are deleted
    # the pod is one the cluster admits under Pod Security "restricted", strictly validated
    template = {"metadata": {}, "spec": pod["spec"]}
    assert pod_template_errors(template) == [] and violations(pod["spec"]) == []


@pytest.mark.kapi
def test_data_too_large_for_configmaps_gets_the_kubectl_commands_and_nothing_is_created(
    kubeconfig: Path, operators: Operators, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(data_copy, "PART_BYTES", 64 * 1024)
    monkeypatch.setattr(data_copy, "MAX_PARTS", 1)
    code, out, err = cli_says("k8s", "cp-data", str(_project(tmp_path)), "-n", operators.ns)
    assert code == 1 and "not copied:" in err and "more than 1 ConfigMaps" in err
    assert f"kubectl -n {operators.ns} cp data/digits/train.jsonl " in out and "cp vocab " in out
    assert _leftovers(operators) == []


def test_print_shows_commands_whose_pod_is_admitted_and_missing_data_is_named(tmp_path: Path) -> None:
    job_file = _project(tmp_path)
    code, out, _ = cli_says("k8s", "cp-data", str(job_file), "--print", "-n", "team-a", "--context", "prod")
    assert code == 0
    lines = out.splitlines()
    assert lines[0] == "kubectl --context prod -n team-a apply -f - <<'EOF'"
    pod = yaml.safe_load("\n".join(lines[1 : lines.index("EOF")]))
    assert pod["metadata"]["namespace"] == "team-a"
    assert pod_template_errors({"metadata": {}, "spec": pod["spec"]}) == [] and violations(pod["spec"]) == []
    name = pod["metadata"]["name"]
    assert (
        f"kubectl --context prod -n team-a cp data/digits/val.jsonl {name}:/mnt/trainctl/data/digits/val.jsonl" in out
    )
    assert lines[-1] == f"kubectl --context prod -n team-a delete pod {name}"
    shutil.rmtree(job_file.parent / "vocab")
    code, _, err = cli_says("k8s", "cp-data", str(job_file), "--print")
    assert code == 2 and "data.vocab:" in err and "does not exist" in err


def test_the_render_note_names_the_copy_command() -> None:
    code, _, err = cli_says("k8s", "render", str(REPO / "examples" / "digits.yaml"))
    assert code == 0 and "copy it there first with `trainctl k8s cp-data <job file>`" in err

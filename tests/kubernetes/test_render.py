"""PyTorchJob render (kubernetes.api: pytorchjob): golden manifests, both schemas, the operator's webhook
rules, and what a job must not leak. (TrainJob render: test_render_trainjob.py.)"""

from __future__ import annotations

import copy
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml
from k8s_testlib import REPO, assert_valid, crd_errors
from trainctl import Job, JobError
from trainctl.targets.kubernetes.render import render, webhook_problems

GOLDEN = REPO / "tests" / "golden" / "kubernetes"

JOBS: dict[str, dict[str, Any]] = {
    "minimal-command": {"name": "hello", "command": ["python", "-c", "print('hi')"]},
    "gpu-elastic": {
        "name": "llm-sft",
        "image": "registry.example.com/ml/trainer@sha256:" + "a" * 64,
        "trainer": {
            "model": "mypkg.models:build",
            "precision": "bf16",
            "batch_size": 8,
            "grad_accum": 4,
            "hang_timeout": 600,
            "straggler_factor": 1.5,
        },
        "resources": {
            "nodes": 3,
            "gpus_per_node": 8,
            "cpus_per_proc": 6,
            "memory": "640Gi",
            "elastic": {"min_nodes": 2, "max_nodes": 4},
            "max_restarts": 3,
        },
        "data": {"train": "pvc://datasets/sft/train", "val": "pvc://trainctl-checkpoints/val.jsonl"},
        "checkpoint": {"every_steps": 500, "keep": 5},
        "env": {"NCCL_DEBUG": "INFO", "HF_HOME": "/tmp/hf"},
        "secrets": [
            {"env": "HF_TOKEN", "name": "hf-token"},
            {"env": "WANDB_API_KEY", "name": "wandb", "key": "api-key"},
        ],
        "max_runtime": "2d",
        "retries": 2,
        "kubernetes": {
            "namespace": "ml-team",
            "kueue_queue": "team-a",
            "volcano_queue": "gpu-gang",
            "priority_class": "high",
            "scheduler_name": "volcano",
            "node_selector": {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"},
            "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
            "affinity": {
                "nodeAffinity": {
                    "requiredDuringSchedulingIgnoredDuringExecution": {
                        "nodeSelectorTerms": [
                            {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a", "b"]}]}
                        ]
                    }
                }
            },
            "image_pull_secrets": ["regcred"],
            "labels": {"team": "nlp"},
            "annotations": {"example.com/owner": "nlp@example.com"},
            "shm_size": "64Gi",
            "clean_pod_policy": "Running",
            "ttl_seconds_after_finished": 3600,
        },
    },
    "no-pvc": {
        "name": "scratch-run",
        "command": ["python", "/app/train.py"],
        "hang": {"quiet_for": "10m", "progress": "^step \\d+"},
        "resources": {"nodes": 2, "procs_per_node": 4, "memory": "1500Mi"},
        "data": {"train": "/data/train.jsonl"},
        "kubernetes": {"pvc": None, "service_account": None, "ttl_seconds_after_finished": None},
    },
}


def _job(key: str) -> Job:
    data = copy.deepcopy(JOBS[key])
    data["kubernetes"] = {**data.get("kubernetes", {}), "api": "pytorchjob"}
    return Job.parse(data)


@pytest.mark.parametrize("key", sorted(JOBS))
def test_golden_and_schemas(key: str, golden: Callable[[Path, str], None]) -> None:
    rendered = render(_job(key))
    golden(GOLDEN / f"{key}.pytorchjob.yaml", rendered.text)
    assert yaml.safe_load(rendered.text) == rendered.native
    assert_valid(rendered.native)


def test_example_job_golden_and_valid(golden: Callable[[Path, str], None]) -> None:
    job = Job.from_yaml(REPO / "examples" / "digits.yaml").with_overrides(["kubernetes.api=pytorchjob"])
    rendered = job.render("kubernetes")
    golden(GOLDEN / "digits.pytorchjob.yaml", rendered.text)
    assert_valid(rendered.native)


def test_render_is_deterministic_and_does_not_import_the_client() -> None:
    texts = {render(_job("gpu-elastic")).text for _ in range(3)}
    assert len(texts) == 1
    code = (
        "import sys; from trainctl import Job; import trainctl.cli.k8s; "
        f"Job.from_yaml({str(REPO / 'examples' / 'digits.yaml')!r}).render('kubernetes'); "
        "assert 'kubernetes' not in sys.modules and 'urllib3' not in sys.modules, 'engine imported by render'"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)


def test_everything_the_issue_asks_for_is_in_the_manifest() -> None:
    m = render(_job("gpu-elastic")).native
    spec = m["spec"]
    assert m["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "team-a"
    assert spec["nprocPerNode"] == "8"
    assert spec["elasticPolicy"] == {"rdzvBackend": "c10d", "minReplicas": 2, "maxReplicas": 4, "maxRestarts": 3}
    # elastic: Workers only (elasticPolicy bounds them; the rendezvous is on worker 0), no Master
    assert list(spec["pytorchReplicaSpecs"]) == ["Worker"]
    assert spec["pytorchReplicaSpecs"]["Worker"]["replicas"] == 3
    run = spec["runPolicy"]
    # retries 2 are trainctl's (a new PyTorchJob per attempt, attempts.py): no restart in place
    assert run["backoffLimit"] == 0 and run["activeDeadlineSeconds"] == 2 * 86400
    assert m["metadata"]["labels"]["trainctl.dev/retries"] == "2"
    assert run["cleanPodPolicy"] == "Running" and run["ttlSecondsAfterFinished"] == 3600
    # the Kueue queue is a label only; the Volcano queue its own field
    assert run["schedulingPolicy"] == {"minAvailable": 2, "queue": "gpu-gang", "priorityClass": "high"}
    for rspec in spec["pytorchReplicaSpecs"].values():
        assert rspec["restartPolicy"] == "Never"
        pod = rspec["template"]["spec"]
        (c,) = pod["containers"]
        assert c["name"] == "pytorch"
        assert c["command"][:4] == [
            "trainer-launch",
            "--workdir",
            "/mnt/trainctl/llm-sft/llm-sft/work",
            "--nproc-per-node",
        ]
        assert "--nnodes" in c["command"] and "2:4" in c["command"]
        assert c["resources"]["limits"] == {"cpu": "48", "memory": "640Gi", "nvidia.com/gpu": "8"}
        assert c["resources"]["requests"] == c["resources"]["limits"]
        sec = c["securityContext"]
        assert sec["allowPrivilegeEscalation"] is False and sec["capabilities"] == {"drop": ["ALL"]}
        assert sec["readOnlyRootFilesystem"] is True and sec["seccompProfile"] == {"type": "RuntimeDefault"}
        assert pod["securityContext"]["runAsNonRoot"] is True and pod["securityContext"]["runAsUser"] == 10001
        vols = {v["name"]: v for v in pod["volumes"]}
        assert vols["dshm"]["emptyDir"] == {"medium": "Memory", "sizeLimit": "64Gi"}
        assert vols["pvc"]["persistentVolumeClaim"] == {"claimName": "trainctl-checkpoints"}
        assert vols["pvc-0"]["persistentVolumeClaim"] == {"claimName": "datasets", "readOnly": True}
        mounts = {mt["mountPath"]: mt for mt in c["volumeMounts"]}
        assert {"/dev/shm", "/tmp", "/mnt/trainctl", "/mnt/pvc/datasets"} <= set(mounts)
        env = {e["name"]: e for e in c["env"]}
        assert env["TRAINER_DATA_TRAIN"]["value"] == "/mnt/pvc/datasets/sft/train"
        assert env["TRAINER_DATA_VAL"]["value"] == "/mnt/trainctl/val.jsonl"
        assert env["HF_TOKEN"]["valueFrom"] == {"secretKeyRef": {"name": "hf-token", "key": "HF_TOKEN"}}
        assert env["WANDB_API_KEY"]["valueFrom"] == {"secretKeyRef": {"name": "wandb", "key": "api-key"}}
        assert pod["serviceAccountName"] == "trainctl-trainer"
        assert pod["imagePullSecrets"] == [{"name": "regcred"}]
        assert pod["priorityClassName"] == "high" and pod["schedulerName"] == "volcano"
        assert pod["tolerations"][0]["key"] == "nvidia.com/gpu"
        assert rspec["template"]["metadata"]["labels"]["team"] == "nlp"


def test_no_secret_value_or_env_secret_in_the_text() -> None:
    job = Job.parse({**JOBS["minimal-command"], "secrets": [{"env": "TOKEN", "name": "tok"}]})
    text = render(job).text
    assert "secretKeyRef" in text and "stringData" not in text and "kind: Secret" not in text


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"data": {"train": "pvc://Bad_Claim/train"}}, "data.train"),
        ({"data": {"train": "rel/train.jsonl"}, "kubernetes": {"pvc": None}}, "data.train"),
        ({"secrets": [{"env": "T", "name": "Bad_Name"}]}, "secrets[0].name"),
        (
            {
                "resources": {"nodes": 1, "elastic": {"min_nodes": 1, "max_nodes": 2}},
                "kubernetes": {"use_master": True, "api": "pytorchjob"},
            },
            "kubernetes.use_master",
        ),
        ({"name": "a" * 55, "resources": {"nodes": 12}}, "name:"),
        ({"command": None, "trainer": {"train_data": "relative/train.jsonl"}}, "trainer.train_data"),
    ],
)
def test_target_rules_raise_job_error_naming_the_field(change: dict[str, Any], field: str) -> None:
    data = {**JOBS["minimal-command"], **change}
    with pytest.raises(JobError) as info:
        render(Job.parse(data))
    assert field in str(info.value), str(info.value)


@pytest.mark.parametrize(
    ("key", "bad"),
    [
        ("namespace", "Team_A"),
        ("labels", {"ok": "bad value!"}),
        ("annotations", {"-bad/key": "x"}),
        ("shm_size", "lots"),
        ("tolerations", [{"key": "a", "operator": "Maybe"}]),
        ("pvc_mount_path", "relative"),
        ("pvc", "Not_A_Name"),
    ],
)
def test_section_rejects_bad_values_by_field(key: str, bad: Any) -> None:
    with pytest.raises(JobError) as info:
        Job.parse({**JOBS["minimal-command"], "kubernetes": {key: bad}})
    assert f"kubernetes.{key}" in str(info.value)


def _good() -> dict[str, Any]:
    return render(_job("gpu-elastic")).native


def _mutations() -> list[tuple[str, Any, str]]:
    def rename(m: dict[str, Any]) -> None:
        m["metadata"]["name"] = "9lives"

    def chief(m: dict[str, Any]) -> None:
        m["spec"]["pytorchReplicaSpecs"]["Chief"] = copy.deepcopy(m["spec"]["pytorchReplicaSpecs"]["Worker"])

    def two_masters(m: dict[str, Any]) -> None:
        m["spec"]["pytorchReplicaSpecs"]["Master"] = {**m["spec"]["pytorchReplicaSpecs"]["Worker"], "replicas": 2}

    def zero_workers(m: dict[str, Any]) -> None:
        m["spec"]["pytorchReplicaSpecs"]["Worker"]["replicas"] = 0

    def workers_outside_elastic_bounds(m: dict[str, Any]) -> None:
        m["spec"]["pytorchReplicaSpecs"]["Worker"]["replicas"] = 5

    def container_name(m: dict[str, Any]) -> None:
        m["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]["name"] = "main"

    def elastic_without_worker(m: dict[str, Any]) -> None:
        del m["spec"]["pytorchReplicaSpecs"]["Worker"]

    def both_nproc(m: dict[str, Any]) -> None:
        m["spec"]["elasticPolicy"]["nProcPerNode"] = 8

    return [
        ("dns-1035 name", rename, "metadata.name"),
        ("only Master/Worker", chief, "spec.pytorchReplicaSpecs.Chief"),
        ("Master exactly 1", two_masters, "spec.pytorchReplicaSpecs.Master.replicas"),
        ("Worker at least 1", zero_workers, "spec.pytorchReplicaSpecs.Worker.replicas"),
        ("elastic bounds Workers", workers_outside_elastic_bounds, "spec.pytorchReplicaSpecs.Worker.replicas"),
        ("container pytorch", container_name, "spec.pytorchReplicaSpecs.Worker.template.spec.containers"),
        ("elastic needs Worker", elastic_without_worker, "spec.elasticPolicy"),
        ("nProcPerNode xor", both_nproc, "spec.elasticPolicy.nProcPerNode"),
    ]


@pytest.mark.parametrize(("rule", "mutate", "field"), _mutations(), ids=[m[0] for m in _mutations()])
def test_webhook_rules(rule: str, mutate: Any, field: str) -> None:
    assert webhook_problems(_good()) == []
    manifest = _good()
    mutate(manifest)
    problems = webhook_problems(manifest)
    assert any(p.startswith(field) for p in problems), problems
    # The CRD schema alone accepts every one of these: that is why trainctl checks them itself.
    assert crd_errors(manifest) == [], rule


def test_schema_checker_can_fail() -> None:
    manifest = _good()
    manifest["spec"]["pytorchReplicaSpecs"]["Worker"]["replicas"] = "two"
    assert crd_errors(manifest)
    from k8s_testlib import pod_template_errors

    template = manifest["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]
    template["spec"]["containers"][0]["volumeMount"] = []  # misspelt: strict mode rejects unknown fields
    assert pod_template_errors(template)


def test_relative_example_paths_land_on_the_pvc(tmp_path: Path) -> None:
    m = Job.from_yaml(REPO / "examples" / "digits.yaml").render("kubernetes").native
    env = {e["name"]: e.get("value") for e in m["spec"]["trainer"]["env"]}
    assert env["TRAINER_DATA_TRAIN"] == "/mnt/trainctl/data/digits/train.jsonl"
    # the run's folder: <mount>/<job name>/<object name>; render shows the job's own name (k8s apply)
    assert env["TRAINER_CHECKPOINT_DIR"] == "/mnt/trainctl/digits/digits/checkpoints"


def test_a_relative_data_path_gets_a_note_with_the_copy_command() -> None:
    """Issue 27 finding 16: a relative data path is read on the PVC; the render says so and how to copy it in."""
    from trainctl import Job

    job = Job.from_yaml(Path(__file__).resolve().parents[2] / "examples" / "digits.yaml")
    notes = [n for n in job.render("kubernetes").notes if n.startswith("data.")]
    assert len(notes) == 2, notes
    train = next(n for n in notes if n.startswith("data.train:"))
    assert "'trainctl-checkpoints' at /mnt/trainctl/data/digits/train.jsonl" in train
    assert "copy it there first with `trainctl k8s cp-data <job file>`" in train  # tests/kubernetes/test_cp_data.py
    remote = job.with_overrides(["data.train=pvc://other/t.jsonl", "data.val=/in/the/image/v.jsonl"])
    assert not [n for n in remote.render("kubernetes").notes if n.startswith("data.")]

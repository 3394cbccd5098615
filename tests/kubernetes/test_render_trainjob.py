"""TrainJob render (the default, kubernetes.api: trainjob): golden files (a GPU job among them, render only),
strict server-side validation of every rendered TrainJob on kapi (the Trainer v2.3.0 CRD, CEL rules
included), the pods the Trainer port makes from it (strictly valid, Pod Security "restricted"), and what
a TrainJob cannot express refused with exit 2 naming the field and the alternative."""

from __future__ import annotations

import copy
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml
from k8s_testlib import REPO, assert_valid, runtimes
from port_trainer import build_jobset
from trainctl import Job, JobError
from trainctl.targets.kubernetes.render import render

GOLDEN = REPO / "tests" / "golden" / "kubernetes"

JOBS: dict[str, dict[str, Any]] = {
    "minimal-command": {"name": "hello", "command": ["python", "-c", "print('hi')"]},
    "gpu": {
        "name": "llm-sft",
        "image": "registry.example.com/ml/trainer@sha256:" + "a" * 64,
        "trainer": {"model": "mypkg.models:build", "precision": "bf16", "batch_size": 8, "grad_accum": 4},
        "resources": {"nodes": 4, "gpus_per_node": 8, "cpus_per_proc": 6, "memory": "640Gi", "max_restarts": 1},
        "data": {"train": "pvc://datasets/sft/train", "val": "pvc://trainctl-checkpoints/val.jsonl"},
        "checkpoint": {"every_steps": 500, "keep": 5},
        "env": {"NCCL_DEBUG": "INFO"},
        "secrets": [{"env": "HF_TOKEN", "name": "hf-token"}],
        "max_runtime": "2d",
        "retries": 2,
        "kubernetes": {
            "namespace": "ml-team",
            "kueue_queue": "team-a",
            "node_selector": {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"},
            "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
            "image_pull_secrets": ["regcred"],
            "labels": {"team": "nlp"},
            "annotations": {"example.com/owner": "nlp@example.com"},
            "shm_size": "64Gi",
        },
    },
    "no-pvc": {
        "name": "scratch-run",
        "command": ["python", "/app/train.py"],
        "resources": {"nodes": 2, "procs_per_node": 4, "memory": "1500Mi"},
        "data": {"train": "/data/train.jsonl"},
        "kubernetes": {"pvc": None},
    },
}


def _job(key: str) -> Job:
    return Job.parse(copy.deepcopy(JOBS[key]))


def _all() -> list[tuple[str, Job]]:
    return [*((k, _job(k)) for k in sorted(JOBS)), ("digits", Job.from_yaml(REPO / "examples" / "digits.yaml"))]


@pytest.mark.parametrize(("key", "job"), _all(), ids=[k for k, _ in _all()])
def test_golden_schema_and_the_pods_the_trainer_makes(key: str, job: Job, golden: Callable[[Path, str], None]) -> None:
    rendered = render(job)
    assert rendered.filename == f"{job.name}.trainjob.yaml"
    golden(GOLDEN / f"{key}.trainjob.yaml", rendered.text)
    assert yaml.safe_load(rendered.text) == rendered.native
    assert_valid(rendered.native)


@pytest.mark.parametrize(("key", "job"), _all(), ids=[k for k, _ in _all()])
def test_the_official_trainjob_model_takes_it_unchanged(key: str, job: Job) -> None:
    """kubeflow-trainer-api 2.3.0 (the types generated from the Trainer's API) parses every rendered
    TrainJob and gives it back unchanged: no field it does not define (it drops those), no wrong type."""
    from kubeflow_trainer_api.models import TrainerV1alpha1TrainJob

    manifest = render(job).native
    assert TrainerV1alpha1TrainJob.from_dict(manifest).to_dict() == manifest
    typo = copy.deepcopy(manifest)
    typo["spec"]["trainer"]["numNode"] = 2
    assert TrainerV1alpha1TrainJob.from_dict(typo).to_dict() != typo


@pytest.mark.kapi
def test_every_rendered_trainjob_passes_strict_server_side_validation(kapi: Path) -> None:
    from kubernetes import client, config

    custom = client.CustomObjectsApi(config.new_client_from_config(config_file=str(kapi)))
    for _, job in _all():
        manifest = render(job).native
        ns = manifest["metadata"]["namespace"]
        custom.create_namespaced_custom_object(
            "trainer.kubeflow.org", "v1alpha1", ns, "trainjobs", manifest, dry_run="All", field_validation="Strict"
        )
    bad = render(_job("gpu")).native
    bad["spec"]["trainer"]["numNode"] = 4  # a typo: strict validation must refuse it
    with pytest.raises(client.ApiException) as info:
        custom.create_namespaced_custom_object(
            "trainer.kubeflow.org", "v1alpha1", "ml-team", "trainjobs", bad, dry_run="All", field_validation="Strict"
        )
    assert "strict decoding error: unknown field" in str(info.value.body) and "spec.trainer.numNode" in str(
        info.value.body
    )


def test_gpu_job_as_the_trainer_runs_it() -> None:
    m = render(_job("gpu")).native
    assert m["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "team-a"
    # retries: 2 are trainctl's (a new TrainJob per attempt, targets/kubernetes/attempts.py): no JobSet restart
    assert m["spec"]["runtimeRef"] == {"name": "trainctl-torch-r0"}
    assert m["metadata"]["labels"]["trainctl.dev/retries"] == "2"
    assert m["spec"]["activeDeadlineSeconds"] == 2 * 86400
    js = build_jobset(copy.deepcopy(m), runtimes()["trainctl-torch-r0"])
    assert js["spec"]["failurePolicy"]["maxRestarts"] == 0
    (rjob,) = js["spec"]["replicatedJobs"]
    assert rjob["template"]["spec"]["parallelism"] == rjob["template"]["spec"]["completions"] == 4
    pod = rjob["template"]["spec"]["template"]
    (node,) = pod["spec"]["containers"]
    env = {e["name"]: e for e in node["env"]}
    assert env["PET_NNODES"]["value"] == "4" and env["PET_NPROC_PER_NODE"]["value"] == "8"
    assert env["PET_MASTER_ADDR"]["value"] == "llm-sft-node-0-0.llm-sft" and env["PET_MASTER_PORT"]["value"] == "29500"
    assert env["HF_TOKEN"]["valueFrom"] == {"secretKeyRef": {"name": "hf-token", "key": "HF_TOKEN"}}
    assert node["resources"]["limits"] == {"cpu": "48", "memory": "640Gi", "nvidia.com/gpu": "8"}
    assert node["resources"]["requests"] == node["resources"]["limits"]
    vols = {v["name"]: v for v in pod["spec"]["volumes"]}
    assert vols["dshm"]["emptyDir"] == {"medium": "Memory", "sizeLimit": "64Gi"}
    assert vols["pvc"]["persistentVolumeClaim"] == {"claimName": "trainctl-checkpoints"}
    assert vols["pvc-0"]["persistentVolumeClaim"] == {"claimName": "datasets", "readOnly": True}
    assert {"/dev/shm", "/tmp", "/mnt/trainctl", "/mnt/pvc/datasets"} <= {v["mountPath"] for v in node["volumeMounts"]}
    assert pod["spec"]["serviceAccountName"] == "trainctl-trainer"
    assert pod["spec"]["imagePullSecrets"] == [{"name": "regcred"}]
    assert pod["spec"]["tolerations"][0]["key"] == "nvidia.com/gpu"
    assert pod["metadata"]["labels"]["team"] == "nlp"


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"resources": {"nodes": 2, "elastic": {"min_nodes": 1, "max_nodes": 3}}}, "resources.elastic"),
        ({"kubernetes": {"use_master": True}}, "kubernetes.use_master"),
        ({"kubernetes": {"volcano_queue": "gang"}}, "kubernetes.volcano_queue"),
        ({"kubernetes": {"priority_class": "high"}}, "kubernetes.priority_class"),
        ({"kubernetes": {"scheduler_name": "volcano"}}, "kubernetes.scheduler_name"),
        ({"kubernetes": {"clean_pod_policy": "All"}}, "kubernetes.clean_pod_policy"),
        ({"kubernetes": {"ttl_seconds_after_finished": 60}}, "kubernetes.ttl_seconds_after_finished"),
    ],
)
def test_what_a_trainjob_cannot_say_is_refused_naming_field_and_alternative(change: dict[str, Any], field: str) -> None:
    with pytest.raises(JobError) as info:
        render(Job.parse({**JOBS["minimal-command"], **change}))
    text = str(info.value)
    assert field in text and "kubernetes.api: pytorchjob" in text, text
    # ...and the PyTorchJob takes it
    data = {**JOBS["minimal-command"], **change}
    data["kubernetes"] = {**data.get("kubernetes", {}), "api": "pytorchjob"}
    if field != "kubernetes.use_master" or "elastic" not in str(change):
        assert render(Job.parse(data)).native["kind"] == "PyTorchJob"


def test_service_account_null_means_the_namespace_default_only_on_a_pytorchjob() -> None:
    """pod.pod_scheduling, shared by both APIs, leaves serviceAccountName out when none is named: a
    PyTorchJob's pod then runs as the namespace's default account. A TrainJob's runtime patch is
    strategic-merged over the runtime's pod (port_trainer.build_jobset), which names trainctl-trainer: an
    omitted field keeps it, so null is refused there, and a named account reaches the TrainJob's pods."""
    unset = {**JOBS["minimal-command"], "kubernetes": {"service_account": None}}
    with pytest.raises(JobError, match=r"kubernetes\.service_account: got null"):
        render(Job.parse(unset))
    pytorch = render(Job.parse({**unset, "kubernetes": {"service_account": None, "api": "pytorchjob"}})).native
    assert "serviceAccountName" not in pytorch["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]
    named = {**JOBS["minimal-command"], "kubernetes": {"service_account": "team-sa"}}
    js = build_jobset(copy.deepcopy(render(Job.parse(named)).native), runtimes()["trainctl-torch-r0"])
    assert js["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]["serviceAccountName"] == "team-sa"
    omitted = build_jobset(
        copy.deepcopy(render(Job.parse(JOBS["minimal-command"])).native), runtimes()["trainctl-torch-r0"]
    )
    assert omitted["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]["serviceAccountName"] == (
        "trainctl-trainer"
    )


def test_queue_was_split_in_two() -> None:
    with pytest.raises(JobError) as info:
        Job.parse({**JOBS["minimal-command"], "kubernetes": {"queue": "team-a"}})
    assert "kueue_queue" in str(info.value) and "volcano_queue" in str(info.value)


def test_own_runtime_and_more_retries() -> None:
    job = {**JOBS["minimal-command"], "retries": 7, "kubernetes": {"runtime": "team-torch-r7"}}
    assert render(Job.parse(job)).native["spec"]["runtimeRef"] == {"name": "team-torch-r7"}


@pytest.mark.parametrize("api", ["trainjob", "pytorchjob"])
def test_names_leave_room_for_the_suffix_submit_adds(api: str) -> None:
    """`trainctl submit` names each run's object <job name>-<4 hex>: render checks the pods' names with those
    5 characters, so a job that renders also submits (1 node: <name>-xxxx-node-0-0 / <name>-xxxx-worker-0)."""
    from trainctl.targets.kubernetes.render import build_manifest

    def job(name: str) -> Job:
        return Job.parse({"name": name, "command": ["true"], "kubernetes": {"api": api}})

    fits = "a" * 49
    assert build_manifest(job(fits))["metadata"]["name"] == fits
    assert build_manifest(job(fits), f"{fits}-1a2b")["metadata"]["name"] == f"{fits}-1a2b"
    with pytest.raises(JobError, match=r"xxxx"):
        build_manifest(job("a" * 50))

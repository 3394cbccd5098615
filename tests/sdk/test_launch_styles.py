"""The job's launch styles as the SDK sees them (pure): `launch: per_node` and `slurm.launch: srun` reach every
target's launcher, the combinations that cannot work are refused naming the field, and `validate` warns about a
launcher command nested under trainctl's own torchrun."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from run_cli import cli  # tests/support
from trainctl import Job, JobError
from trainctl.spec.launching import nested_launcher
from trainctl.submit.bundle import prepare
from trainctl.targets.kubernetes import engine as k8s_engine
from trainctl.targets.sagemaker.request import build_request

TORCHRUN = ["torchrun", "--nnodes", "2", "--nproc-per-node", "2", "train.py"]
IMAGE = "123456789012.dkr.ecr.us-east-1.amazonaws.com/trainctl-trainer:0.1.0"


def per_node(**more: Any) -> dict[str, Any]:
    return {"name": "mine", "command": TORCHRUN, "launch": "per_node", "resources": {"nodes": 2, "procs_per_node": 2},
            **more}  # fmt: skip


@pytest.mark.parametrize(
    ("command", "found"),
    [
        (["torchrun", "train.py"], "torchrun"),
        (["/opt/venv/bin/torchrun", "--nproc-per-node=4", "train.py"], "torchrun"),
        (["python", "-m", "torch.distributed.run", "train.py"], "python -m torch.distributed.run"),
        (["python3.11", "-m", "torch.distributed.launch", "train.py"], "python -m torch.distributed.launch"),
        (["accelerate", "launch", "train.py"], "accelerate launch"),
        (["deepspeed", "--num_gpus", "8", "train.py"], "deepspeed"),
        (["python", "train.py"], None),
        (["python", "-m", "trainer.train"], None),
        (["accelerate", "config"], None),
    ],
)
def test_nested_launcher(command: list[str], found: str | None) -> None:
    assert nested_launcher(command) == found


def test_validate_warns_about_a_nested_launcher(tmp_path: Path) -> None:
    job = tmp_path / "job.yaml"
    job.write_text(yaml.safe_dump({"name": "nested", "command": ["python", "-m", "torch.distributed.run", "t.py"],
                                   "resources": {"procs_per_node": 2}}))  # fmt: skip
    done = cli("validate", str(job))
    assert done.exit_code == 0, done.output
    assert (
        "warning: command: starts with 'python -m torch.distributed.run', under trainctl's own torchrun" in done.stderr
    )
    assert "2 process(es) per node would each start" in done.stderr and "`launch: per_node`" in done.stderr
    as_json = json.loads(cli("validate", str(job), "--output", "json").stdout)
    assert len(as_json["warnings"]) == 1
    job.write_text(yaml.safe_dump(per_node()))
    done = cli("validate", str(job), "--target", "slurm")  # 2 nodes: not the local target
    assert done.exit_code == 0 and "warning" not in done.stderr and "once per node (launch: per_node)" in done.stdout


@pytest.mark.parametrize(
    ("data", "field", "words"),
    [
        ({"name": "t", "trainer": {}, "data": {"train": "x"}, "launch": "per_node"}, "launch", "built-in trainer"),
        (per_node(resources={"nodes": 2, "elastic": {"min_nodes": 1, "max_nodes": 2}}), "resources.elastic",
         "fixed resources.nodes"),
        (per_node(slurm={"launch": "srun"}), "slurm.launch", "choose one"),
        (per_node(env={"NODE_RANK": "3"}), "env", "NODE_RANK: set by the launcher"),
        ({"name": "s", "command": ["x"], "slurm": {"launch": "srun"}, "resources": {"max_restarts": 2}},
         "resources.max_restarts", "no torchrun"),
        ({"name": "s", "command": ["x"], "slurm": {"launch": "srun"},
          "resources": {"nodes": 2, "elastic": {"min_nodes": 1, "max_nodes": 2}}}, "resources.elastic", "no torchrun"),
        ({"name": "s", "command": ["x"], "slurm": {"launch": "srun"},
          "resources": {"gpus_per_node": 4, "procs_per_node": 2}}, "resources.procs_per_node", "one GPU to each task"),
    ],
)  # fmt: skip
def test_what_cannot_work_is_refused_naming_the_field(data: dict[str, Any], field: str, words: str) -> None:
    with pytest.raises(JobError) as info:
        Job.parse(data)
    assert f"{field}: " in str(info.value) and words in str(info.value), str(info.value)


def test_per_node_reaches_every_launcher() -> None:
    job = Job.parse(per_node(kubernetes={"pvc": "trainctl-checkpoints"}))
    local = Job.parse({**per_node(), "resources": {"nodes": 1, "procs_per_node": 2}}).render("local").native["argv"]
    torchrun = [sys.executable, "-m", "torch.distributed.run", *TORCHRUN[1:]]  # local.python's torchrun
    assert local[local.index("--launch") + 1] == "per_node" and local[local.index("--") + 1 :] == torchrun
    script = job.render("slurm").text
    assert 'trainer-launch --workdir "${TRAINCTL_RUN_DIR}"/work --launch per_node --nproc-per-node 2' in script
    assert "--ntasks-per-node=1" in script and "which runs your command (launch: per_node)" in script
    trainjob = job.render("kubernetes").native
    assert trainjob["spec"]["trainer"]["command"][3:5] == ["--launch", "per_node"]
    sm = build_request(Job.parse(per_node(image=IMAGE, sagemaker={
        "role_arn": "arn:aws:iam::123456789012:role/r", "instance_type": "ml.c5.xlarge",
        "output_s3_uri": "s3://bucket/out/"})), "mine-1")  # fmt: skip
    assert sm["AlgorithmSpecification"]["ContainerArguments"][:2] == ["--launch", "per_node"]
    assert json.loads(sm["HyperParameters"]["trainctl_command"]) == TORCHRUN


def test_kubernetes_names_the_pods_of_the_submitted_object() -> None:
    """No Kubeflow variable lists the pods: the SDK names them for the launcher, as each API names them."""
    job = Job.parse(per_node(kubernetes={"pvc": "trainctl-checkpoints"}))
    tj = k8s_engine.build_manifest(job, name="mine-ab12")
    env = {e["name"]: e.get("value") for e in tj["spec"]["trainer"]["env"]}
    assert env["TRAINCTL_NODE_ADDRS"] == "mine-ab12-node-0-0.mine-ab12 mine-ab12-node-0-1.mine-ab12"
    pj = k8s_engine.build_manifest(job.with_overrides(["kubernetes.api=pytorchjob"]), name="mine-ab12")
    for replica in ("Master", "Worker"):
        container = pj["spec"]["pytorchReplicaSpecs"][replica]["template"]["spec"]["containers"][0]
        env = {e["name"]: e.get("value") for e in container["env"]}
        assert env["TRAINCTL_NODE_ADDRS"] == "mine-ab12-master-0 mine-ab12-worker-0"
    plain = Job.parse({"name": "mine", "command": ["python", "t.py"], "kubernetes": {"pvc": "trainctl-checkpoints"}})
    assert "TRAINCTL_NODE_ADDRS" not in json.dumps(k8s_engine.build_manifest(plain, name="mine-ab12"))


def test_per_node_code_on_sagemaker_runs_the_command_from_the_code_channel(tmp_path: Path) -> None:
    (tmp_path / "train.py").write_text("print('hi')\n")
    job = Job.parse(per_node(image=IMAGE, code=str(tmp_path), sagemaker={
        "role_arn": "arn:aws:iam::123456789012:role/r", "instance_type": "ml.c5.xlarge",
        "output_s3_uri": "s3://bucket/out/"}))  # fmt: skip
    job = prepare(job)
    request = build_request(job, "mine-1")
    hp = {k: json.loads(v) for k, v in request["HyperParameters"].items()}
    assert hp["trainctl_command"] == TORCHRUN and hp["sagemaker_submit_directory"].endswith("sourcedir.tar.gz")
    assert [c["ChannelName"] for c in request["InputDataConfig"]] == ["code"]
    toolkit = job.with_overrides(["sagemaker.container=toolkit"])
    with pytest.raises(JobError, match="launch: per_node: the toolkit runs the script itself"):
        toolkit.render("sagemaker")


def test_srun_lays_out_one_task_per_process() -> None:
    job = Job.parse({"name": "s", "command": ["python", "t.py"], "resources": {"nodes": 2, "procs_per_node": 2,
                     "cpus_per_proc": 3}, "slurm": {"launch": "srun"}})  # fmt: skip
    text = job.render("slurm").text
    assert "#SBATCH --ntasks-per-node=2\n#SBATCH --cpus-per-task=3\n" in text
    assert 'srun --nodes="$SLURM_JOB_NUM_NODES" --ntasks="$((SLURM_JOB_NUM_NODES * 2))" --ntasks-per-node=2 ' in text
    assert "--launch srun --nproc-per-node 2 --max-restarts 0 --" in text
    gpus = job.with_overrides(["resources.gpus_per_node=2"]).render("slurm").text
    assert "#SBATCH --gpus-per-task=1\n" in gpus and "--kill-on-bad-exit=1 --gpus-per-task=1" in gpus
    gres = job.with_overrides(["resources.gpus_per_node=2", "slurm.gpu_directive=gres"]).render("slurm").text
    assert "#SBATCH --gres=gpu:2\n" in gres and "--kill-on-bad-exit=1 --gpu-bind=per_task:1" in gres
    torchrun = job.with_overrides(["slurm.launch=torchrun"]).render("slurm").text
    assert "#SBATCH --ntasks-per-node=1\n#SBATCH --cpus-per-task=6\n" in torchrun and "--launch" not in torchrun


def test_per_node_code_is_refused_through_the_estimator(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """SDK 2.x uploads its own entry point as the code when no sagemaker_program is named; the direct request
    (and local mode) carry the job's folder instead."""
    for key, value in {
        "AWS_DEFAULT_REGION": "us-east-1",
        "AWS_ACCESS_KEY_ID": "x",
        "AWS_SECRET_ACCESS_KEY": "y",
    }.items():
        monkeypatch.setenv(key, value)
    (tmp_path / "train.py").write_text("print('hi')\n")
    job = Job.parse(per_node(image=IMAGE, code=str(tmp_path), sagemaker={
        "role_arn": "arn:aws:iam::123456789012:role/r", "instance_type": "ml.c5.xlarge",
        "output_s3_uri": "s3://bucket/out/", "region": "us-east-1"}))  # fmt: skip
    with pytest.raises(JobError, match=r"launch: per_node with code: SDK 2\.x would upload its own entry point"):
        job.to_estimator()


def test_the_sdk_reserves_what_the_launcher_sets_per_node() -> None:
    """A per_node job's env may not set what the launcher sets for its command (the launcher's values would win)."""
    from trainctl.spec.launching import PER_NODE_ENV
    from trainer.launcher.launch_modes import per_node_env

    env = per_node_env(nnodes=2, node_rank=0, nproc=1, master="m", port=1, hosts=["m"], gpus=0, restarts=0)
    assert {k for k in env if not k.startswith("PET_")} - {"MASTER_ADDR", "MASTER_PORT"} == PER_NODE_ENV
    with pytest.raises(JobError, match="PET_RDZV_BACKEND: set by the launcher"):
        Job.parse(per_node(env={"PET_RDZV_BACKEND": "c10d"}))

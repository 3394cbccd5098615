"""Our stand-in checked against theirs: the launcher's `--dry-run` and AWS's sagemaker-training toolkit
(installed by scripts/setup.sh beside the venv) read the same fake /opt/ml tree and must agree on hosts,
current host, master, node count, node rank, channels, every SM_* variable and the EFA/NCCL variables.

Each tree is one host of a cluster: 2, 4 and 12 hosts, and a heterogeneous cluster (a CPU data group
and a GPU training group). A fake `nvidia-smi` on PATH gives both the same GPU count.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from trainctl.job import Job
from trainctl.submit.bundle import prepare
from trainctl.targets.sagemaker.render import render

REPO = Path(__file__).resolve().parents[2]
VENV_BIN = Path(sys.executable).parent
ORACLE_SCRIPT = Path(__file__).with_name("toolkit_oracle.py")


def _toolkit_dir() -> Path:
    found = sorted((VENV_BIN.parent / "oracle").glob("sagemaker-training-*/sagemaker_training"))
    assert found, "the sagemaker-training toolkit is missing: run scripts/setup.sh (it installs the oracle)"
    return found[-1].parent


def _tree(
    root: Path,
    hosts: list[str],
    current: str,
    groups: dict[str, tuple[str, list[str]]],
    hyperparameters: dict[str, str],
    channels: list[str],
) -> Path:
    """resourceconfig.json as SageMaker writes it (instance_groups even for one group), and the rest."""
    group = next(name for name, (_, members) in groups.items() if current in members)
    config = root / "opt/ml/input/config"
    config.mkdir(parents=True)
    resource = {
        "current_host": current,
        "current_instance_type": groups[group][0],
        "current_group_name": group,
        "hosts": hosts,
        "instance_groups": [
            {"instance_group_name": name, "instance_type": itype, "hosts": members}
            for name, (itype, members) in groups.items()
        ],
        "network_interface_name": "eth0",
    }
    (config / "resourceconfig.json").write_text(json.dumps(resource))
    (config / "hyperparameters.json").write_text(json.dumps(hyperparameters))
    data_config = {c: {"TrainingInputMode": "File", "S3DistributionType": "FullyReplicated"} for c in channels}
    (config / "inputdataconfig.json").write_text(json.dumps(data_config))
    for channel in channels:
        (root / "opt/ml/input/data" / channel).mkdir(parents=True)
    return root


def _env(tmp: Path, gpus: int) -> dict[str, str]:
    fake = tmp / "fakebin"
    fake.mkdir(exist_ok=True)
    if gpus:
        lines = "".join(f"echo 'GPU {i}: NVIDIA A100-SXM4-40GB (UUID: GPU-{i})'\n" for i in range(gpus))
        (fake / "nvidia-smi").write_text("#!/bin/sh\n" + lines)
        (fake / "nvidia-smi").chmod(0o755)
    empty = tmp / "aws-empty"
    empty.write_text("")
    return {
        "PATH": f"{fake}{os.pathsep}{VENV_BIN}{os.pathsep}/usr/bin{os.pathsep}/bin",
        "HOME": str(tmp),
        "AWS_DEFAULT_REGION": "eu-west-1",
        "AWS_CONFIG_FILE": str(empty),
        "AWS_SHARED_CREDENTIALS_FILE": str(empty),
        "AWS_EC2_METADATA_DISABLED": "true",
        "TRAINING_JOB_NAME": "oracle-job",
    }


def _toolkit(root: Path, env: dict[str, str]) -> dict[str, Any]:
    oracle_env = {**env, "PYTHONPATH": str(_toolkit_dir()), "SAGEMAKER_BASE_DIR": str(root / "opt/ml")}
    done = subprocess.run(
        [sys.executable, str(ORACLE_SCRIPT)], env=oracle_env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr[-3000:]
    result: dict[str, Any] = json.loads(done.stdout)
    return result


def _launcher(root: Path, env: dict[str, str]) -> dict[str, Any]:
    """The image's `train` (SageMaker's `docker run IMAGE train`), dry run."""
    launch_env = {**env, "TRAINER_SAGEMAKER_ROOT": str(root)}
    argv = ["sh", str(REPO / "trainer_image/bin/train"), "--dry-run"]
    done = subprocess.run(argv, env=launch_env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    plan: dict[str, Any] = json.loads(done.stdout)
    return plan


def _option(argv: list[str], name: str) -> str | None:
    return argv[argv.index(name) + 1] if name in argv else None


def _agree(root: Path, env: dict[str, str]) -> dict[str, Any]:
    theirs, ours = _toolkit(root, env), _launcher(root, env)
    our_sm = {k: v for k, v in ours["env"].items() if k.startswith("SM_")}
    assert our_sm == theirs["sm"]
    for key, value in theirs["process"].items():
        assert ours["env"][key] == value, key
    for channel in json.loads(theirs["sm"]["SM_CHANNELS"]):
        assert ours["env"][f"TRAINER_DATA_{channel.upper()}"] == theirs["sm"][f"SM_CHANNEL_{channel.upper()}"]
    if theirs["runner"] == "process":
        assert ours["mode"] == "process" and ours["nnodes"] == "1"
        return theirs
    cmd = theirs["runner"]
    assert ours["mode"] == "torchrun"
    assert ours["nnodes"] == _option(cmd, "--nnodes")
    assert str(ours["nproc_per_node"]) == _option(cmd, "--nproc_per_node")
    if int(ours["nnodes"]) > 1:
        assert ours["master_addr"] == _option(cmd, "--master_addr") == theirs["master"]
        assert str(ours["node_rank"]) == _option(cmd, "--node_rank")
    efa = {k: v for k, v in theirs["efa"].items() if k != "NCCL_PROTO"}  # left out on purpose: sagemaker/toolkit_env.py
    assert {k: ours["env"].get(k) for k in efa} == efa
    assert not {"FI_PROVIDER", "FI_EFA_USE_DEVICE_RDMA", "RDMAV_FORK_SAFE"} - set(efa) & set(ours["env"])
    return theirs


def _rendered_hyperparameters(spec: Any, nodes: int, instance_type: str) -> dict[str, str]:
    data = spec.job_data(resources={"nodes": nodes}, sagemaker=spec.sagemaker_data(instance_type=instance_type))
    hyperparameters: dict[str, str] = render(prepare(Job.parse(data))).native["HyperParameters"]
    return hyperparameters


@pytest.mark.parametrize(
    ("count", "instance_type", "gpus", "currents"),
    [
        (2, "ml.g5.xlarge", 1, ["algo-1", "algo-2"]),
        (4, "ml.p4d.24xlarge", 8, ["algo-1", "algo-2", "algo-3", "algo-4"]),
        (12, "ml.p5.48xlarge", 8, ["algo-1", "algo-2", "algo-10", "algo-12"]),
    ],
)
def test_homogeneous_cluster_agrees_with_the_toolkit(
    spec: Any, tmp_path: Path, count: int, instance_type: str, gpus: int, currents: list[str]
) -> None:
    hosts = [f"algo-{i + 1}" for i in range(count)]  # as written; the toolkit does not re-sort
    hyperparameters = _rendered_hyperparameters(spec, count, instance_type)
    seen = []
    for current in currents:
        root = _tree(
            tmp_path / current,
            hosts,
            current,
            {"homogeneousCluster": (instance_type, hosts)},
            hyperparameters,
            ["train", "val"],
        )
        theirs = _agree(root, _env(tmp_path, gpus))
        seen.append((theirs["sm"]["SM_CURRENT_HOST"], _option(theirs["runner"], "--node_rank")))
    assert seen == [(h, str(hosts.index(h))) for h in currents]  # algo-10 is rank 9, not 1


def test_heterogeneous_cluster_trains_on_the_distribution_group_only(tmp_path: Path) -> None:
    data_hosts, train_hosts = ["algo-1", "algo-2"], ["algo-3", "algo-4", "algo-5"]
    groups = {"data": ("ml.c5.2xlarge", data_hosts), "train": ("ml.p4d.24xlarge", train_hosts)}
    hyperparameters = {
        "sagemaker_program": json.dumps("train.py"),
        "sagemaker_submit_directory": json.dumps("s3://bucket/code/sourcedir.tar.gz"),
        "sagemaker_distribution_instance_groups": json.dumps(["train"]),
        "sagemaker_region": json.dumps("us-west-2"),
        "epochs": "3",
        "model_args": json.dumps({"channels": 8}),
    }
    for current in ["algo-1", "algo-3", "algo-5"]:
        root = _tree(tmp_path / current, data_hosts + train_hosts, current, groups, hyperparameters, ["train", "code"])
        theirs = _agree(root, _env(tmp_path, 8))
        if current in train_hosts:
            assert _option(theirs["runner"], "--nnodes") == "3" and theirs["master"] == "algo-3"
        else:
            assert theirs["runner"] == "process"


SAGEMAKER_SCRIPT = b"""\
import argparse, json, os
# as AWS's examples write it: every path and the cluster from SM_* (KeyError if one is missing)
p = argparse.ArgumentParser()
p.add_argument("--epochs", type=int)
p.add_argument("--learning_rate", type=float)
p.add_argument("--shuffle")
p.add_argument("--model-dir", default=os.environ["SM_MODEL_DIR"])
p.add_argument("--train", default=os.environ["SM_CHANNEL_TRAIN"])
args = p.parse_args()
hosts = json.loads(os.environ["SM_HOSTS"])
out = {"hosts": hosts, "current": os.environ["SM_CURRENT_HOST"], "gpus": int(os.environ["SM_NUM_GPUS"]),
       "hps": json.loads(os.environ["SM_HPS"]), "epochs": args.epochs, "lr": args.learning_rate, "shuffle": args.shuffle, "train": os.listdir(args.train),
       "output_data_dir": os.environ["SM_OUTPUT_DATA_DIR"], "rank": os.environ["RANK"]}
with open(os.path.join(args.model_dir, "seen.json"), "w") as f:
    json.dump(out, f)
"""


def test_a_sagemaker_script_runs_unchanged(tmp_path: Path) -> None:
    """A real launch (torchrun, one process) of a script written for SageMaker's toolkit."""
    import io
    import tarfile

    hyperparameters = {
        "sagemaker_program": json.dumps("train.py"),
        "epochs": "3",
        "learning_rate": "0.1",
        "shuffle": "true",
    }
    root = _tree(
        tmp_path / "sm",
        ["algo-1"],
        "algo-1",
        {"homogeneousCluster": ("ml.m5.xlarge", ["algo-1"])},
        hyperparameters,
        ["train", "code"],
    )
    (root / "opt/ml/input/data/train/part-0.jsonl").write_text("{}\n")
    (root / "opt/ml/model").mkdir(parents=True)
    with tarfile.open(root / "opt/ml/input/data/code/sourcedir.tar.gz", "w:gz") as tar:
        info = tarfile.TarInfo("train.py")
        info.size = len(SAGEMAKER_SCRIPT)
        tar.addfile(info, io.BytesIO(SAGEMAKER_SCRIPT))
    env = {**_env(tmp_path, 0), "TRAINER_SAGEMAKER_ROOT": str(root)}
    done = subprocess.run(
        ["sh", str(REPO / "trainer_image/bin/train")], env=env, capture_output=True, text=True, timeout=180
    )
    assert done.returncode == 0, done.stderr[-3000:]
    seen = json.loads((root / "opt/ml/model/seen.json").read_text())
    assert seen == {
        "hosts": ["algo-1"], "current": "algo-1", "gpus": 0, "hps": {"epochs": 3, "learning_rate": 0.1, "shuffle": True}, "epochs": 3, "lr": 0.1, "shuffle": "True",
        "train": ["part-0.jsonl"], "output_data_dir": str(root / "opt/ml/output/data"), "rank": "0",
    }  # fmt: skip


def test_a_jobs_own_nccl_setting_wins_over_the_efa_defaults(tmp_path: Path) -> None:
    from trainer.launcher.platforms import LaunchOptions, plan_from_env
    from trainer.launcher.sagemaker.toolkit_env import HostFacts

    hosts = ["algo-1", "algo-2"]
    root = _tree(tmp_path, hosts, "algo-2", {"homogeneousCluster": ("ml.p4d.24xlarge", hosts)}, {}, ["train"])
    facts = HostFacts(num_gpus=8, num_cpus=96)
    plan = plan_from_env({}, LaunchOptions(program=["x"]), root=root, sagemaker_facts=facts)
    assert (plan.env["FI_PROVIDER"], plan.env["NCCL_SOCKET_IFNAME"], plan.nproc_per_node) == ("efa", "eth0", 8)
    plan = plan_from_env({"NCCL_SOCKET_IFNAME": "ens5"}, LaunchOptions(program=["x"]), root=root, sagemaker_facts=facts)
    assert "NCCL_SOCKET_IFNAME" not in plan.env and plan.env["FI_EFA_USE_DEVICE_RDMA"] == "1"


def test_rank_1_raising_is_named_in_the_failure_reason(tmp_path: Path) -> None:
    """Issue 37 section 1: rank 1 of 2 processes raises under the launcher on a SageMaker host (the tree above);
    /opt/ml/output/failure, which SageMaker carries as `AlgorithmError: ` + its text in FailureReason (at most
    1024 characters), names the first failing rank, its host, the exception and its last lines, and the SDK's
    status of that FailureReason says the same."""
    import io
    import tarfile

    from trainctl.runs.records import explained
    from trainctl.runs.state import RunState, RunStatus
    from trainctl.targets.sagemaker.causes import failure_of

    program = (REPO / "tests/programs/boom/boom_rank1.py").read_bytes()
    hyperparameters = {"sagemaker_program": json.dumps("boom_rank1.py"), "sagemaker_torch_distributed_enabled": "true",
                       "sagemaker_mpi_num_of_processes_per_host": "2"}  # fmt: skip
    root = _tree(tmp_path / "sm", ["algo-1"], "algo-1", {"homogeneousCluster": ("ml.m5.xlarge", ["algo-1"])},
                 hyperparameters, ["code"])  # fmt: skip
    (root / "opt/ml/model").mkdir(parents=True)
    with tarfile.open(root / "opt/ml/input/data/code/sourcedir.tar.gz", "w:gz") as tar:
        info = tarfile.TarInfo("boom_rank1.py")
        info.size = len(program)
        tar.addfile(info, io.BytesIO(program))
    inherited = {k: os.environ[k] for k in ("PYTHONPATH",) if k in os.environ}  # a worktree's trainer over the venv's
    env = {**_env(tmp_path, 0), "TRAINER_SAGEMAKER_ROOT": str(root), **inherited}
    done = subprocess.run(["sh", str(REPO / "trainer_image/bin/train")], env=env, capture_output=True, text=True,
                          timeout=180)  # fmt: skip
    assert done.returncode == 1, done.stderr[-3000:]
    text = (root / "opt/ml/output/failure").read_text()
    headline = "rank 1 on algo-1 failed (exit 1): RuntimeError: boom on rank 1 at epoch 2"
    assert text.splitlines()[:2] == [headline, "last lines of rank 1:"] and len(text) <= 1000, done.stderr[-3000:]
    reason = f"AlgorithmError: {text}"[:1024]
    status = explained(RunStatus(state=RunState.FAILED, reason=reason, failure=failure_of(reason)))
    assert status.reason == headline and status.failure is not None and status.failure.node == "algo-1"
    assert status.log_tail[-1] == "RuntimeError: boom on rank 1 at epoch 2" and "epoch 2 on rank 1" in status.log_tail

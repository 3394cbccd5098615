"""The launcher's modes besides its own torchrun, as tables (launch_modes.py and platforms.plan_from_env are pure):
`--launch srun` (one SLURM task per process), `--launch per_node` (the user's launcher once per node) and the
SLURM task variables a torchrun worker sees (trainer/slurm_worker.py)."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest
from trainer.errors import TrainerInputError
from trainer.launcher.launch_modes import per_node_unset, tasks_per_node, worker_task_env
from trainer.launcher.platforms import LaunchOptions, plan_from_env
from trainer.launcher.sagemaker import files as sm

from .conftest import PY, clean_env, launch_cmd

PROG = ["python", "train.py"]


def opts(**kw: Any) -> LaunchOptions:
    return LaunchOptions(program=list(PROG), **kw)


@pytest.mark.parametrize(
    ("text", "counts"),
    [("2(x3),1", [2, 2, 2, 1]), ("4", [4]), ("1,2,3", [1, 2, 3]), ("8(x2)", [8, 8]), ("", [])],
)
def test_tasks_per_node(text: str, counts: list[int]) -> None:
    assert tasks_per_node(text) == counts


def test_tasks_per_node_refuses_other_text() -> None:
    with pytest.raises(TrainerInputError, match="tasks per node '2x3'"):
        tasks_per_node("2x3")


# What srun sets in each task of `srun --nodes=2 --ntasks=4 --ntasks-per-node=2` on n[1-2] (srun(1) OUTPUT
# ENVIRONMENT VARIABLES); the batch script exports MASTER_ADDR/MASTER_PORT.
def srun_task(procid: int, localid: int, nodeid: int, **more: str) -> dict[str, str]:
    return {
        "SLURM_JOB_ID": "77", "SLURM_JOB_NODELIST": "n[1-2]", "SLURM_NNODES": "2", "SLURM_STEP_NUM_NODES": "2",
        "SLURM_NTASKS": "4", "SLURM_NTASKS_PER_NODE": "2", "SLURM_TASKS_PER_NODE": "2(x2)",
        "SLURM_STEP_TASKS_PER_NODE": "2(x2)", "SLURM_PROCID": str(procid), "SLURM_LOCALID": str(localid),
        "SLURM_NODEID": str(nodeid), **more,
    }  # fmt: skip


@pytest.mark.parametrize(
    ("task", "expected"),
    [
        (srun_task(0, 0, 0, MASTER_ADDR="n1", MASTER_PORT="20077"),
         {"RANK": "0", "LOCAL_RANK": "0", "WORLD_SIZE": "4", "LOCAL_WORLD_SIZE": "2", "GROUP_RANK": "0",
          "MASTER_ADDR": "n1", "MASTER_PORT": "20077"}),
        (srun_task(3, 1, 1, MASTER_ADDR="n1", MASTER_PORT="20077"),
         {"RANK": "3", "LOCAL_RANK": "1", "WORLD_SIZE": "4", "LOCAL_WORLD_SIZE": "2", "GROUP_RANK": "1",
          "MASTER_ADDR": "n1", "MASTER_PORT": "20077"}),
        # no MASTER_ADDR/PORT exported: the first node of the allocation, torch's default port
        (srun_task(2, 0, 1), {"RANK": "2", "LOCAL_RANK": "0", "WORLD_SIZE": "4", "LOCAL_WORLD_SIZE": "2",
                              "GROUP_RANK": "1", "MASTER_ADDR": "n1", "MASTER_PORT": "29500"}),
        # uneven tasks (srun --ntasks=3 on 2 nodes: 2,1): node 1's local world is 1
        ({**srun_task(2, 0, 1), "SLURM_NTASKS": "3", "SLURM_STEP_TASKS_PER_NODE": "2,1"},
         {"RANK": "2", "LOCAL_RANK": "0", "WORLD_SIZE": "3", "LOCAL_WORLD_SIZE": "1", "GROUP_RANK": "1",
          "MASTER_ADDR": "n1", "MASTER_PORT": "29500"}),
    ],
)  # fmt: skip
def test_srun_task_takes_torch_variables_from_slurm(task: dict[str, str], expected: dict[str, str]) -> None:
    plan = plan_from_env(task, opts(launch="srun"), root=Path("/nonexistent"))
    assert (plan.platform, plan.mode, plan.program) == ("slurm", "srun", PROG)
    assert plan.env == expected
    assert (plan.nnodes, plan.node_rank, plan.hosts) == ("2", int(expected["GROUP_RANK"]), ["n1", "n2"])


@pytest.mark.parametrize(
    ("env", "kw", "message"),
    [
        ({}, {}, "this is no SLURM task"),
        ({"PET_NNODES": "2", "PET_MASTER_ADDR": "m", "PET_NODE_RANK": "0"}, {}, "platform kubeflow"),
        ({k: v for k, v in srun_task(0, 0, 0).items() if k != "SLURM_PROCID"}, {}, "SLURM_PROCID=''"),
        (srun_task(0, 0, 0), {"nproc_per_node": 4}, "SLURM started 2 task"),
        (srun_task(0, 0, 0), {"max_restarts": 1}, "no torchrun"),
        (srun_task(0, 0, 0), {"nnodes": "1:2"}, "no torchrun"),
    ],
)
def test_srun_mode_refuses_what_it_cannot_run(env: dict[str, str], kw: dict[str, Any], message: str) -> None:
    with pytest.raises(TrainerInputError, match=message):
        plan_from_env(env, opts(launch="srun", **kw), root=Path("/nonexistent"))


def test_srun_mode_agrees_with_the_job_count() -> None:
    plan = plan_from_env(srun_task(1, 1, 0), opts(launch="srun", nproc_per_node=2), root=Path("/nonexistent"))
    assert plan.nproc_per_node == 2 and plan.env["RANK"] == "1"


def node_vars(plan: Any) -> dict[str, str]:
    keys = ("NNODES", "NODE_RANK", "NPROC_PER_NODE", "MASTER_ADDR", "MASTER_PORT", "TRAINCTL_NODE_ADDRS")
    return {k: plan.env.get(k) for k in keys}


def sagemaker_root(tmp: Path, current: str) -> Path:
    (tmp / sm.RESOURCE_CONFIG).parent.mkdir(parents=True)
    config = {"current_host": current, "hosts": ["algo-1", "algo-2"], "network_interface_name": "eth0"}
    (tmp / sm.RESOURCE_CONFIG).write_text(json.dumps(config))
    return tmp


@pytest.mark.parametrize(
    ("platform", "env", "node"),
    [
        ("slurm", {"SLURM_JOB_ID": "9", "SLURM_JOB_NODELIST": "n[1-2]", "SLURM_NNODES": "2", "SLURM_NODEID": "1",
                   "MASTER_PORT": "20009"},
         {"NNODES": "2", "NODE_RANK": "1", "NPROC_PER_NODE": "2", "MASTER_ADDR": "n1", "MASTER_PORT": "20009",
          "TRAINCTL_NODE_ADDRS": "n1\nn2"}),
        # a TrainJob pod (Trainer's torch plugin) with the pods named by the SDK
        ("kubeflow", {"PET_NNODES": "2", "PET_NPROC_PER_NODE": "2", "PET_NODE_RANK": "1",
                      "PET_MASTER_ADDR": "j-node-0-0.j", "PET_MASTER_PORT": "29400",
                      "TRAINCTL_NODE_ADDRS": "j-node-0-0.j j-node-0-1.j"},
         {"NNODES": "2", "NODE_RANK": "1", "NPROC_PER_NODE": "2", "MASTER_ADDR": "j-node-0-0.j",
          "MASTER_PORT": "29400", "TRAINCTL_NODE_ADDRS": "j-node-0-0.j\nj-node-0-1.j"}),
        # a PyTorchJob worker (the operator sets RANK = its pod index, WORLD_SIZE)
        ("kubeflow", {"MASTER_ADDR": "j-master-0", "MASTER_PORT": "23456", "WORLD_SIZE": "4", "RANK": "1",
                      "PET_MASTER_ADDR": "j-master-0", "PET_MASTER_PORT": "23456", "PET_NNODES": "2",
                      "PET_NODE_RANK": "1", "PET_NPROC_PER_NODE": "2"},
         {"NNODES": "2", "NODE_RANK": "1", "NPROC_PER_NODE": "2", "MASTER_ADDR": "j-master-0",
          "MASTER_PORT": "23456", "TRAINCTL_NODE_ADDRS": None}),
        ("sagemaker", {}, {"NNODES": "2", "NODE_RANK": "1", "NPROC_PER_NODE": "2", "MASTER_ADDR": "algo-1",
                           "MASTER_PORT": "29500", "TRAINCTL_NODE_ADDRS": "algo-1\nalgo-2"}),
        # one node: this machine's loopback and a free port
        ("local", {}, {"NNODES": "1", "NODE_RANK": "0", "NPROC_PER_NODE": "2", "MASTER_ADDR": "127.0.0.1",
                       "MASTER_PORT": "41234", "TRAINCTL_NODE_ADDRS": "127.0.0.1"}),
    ],
)  # fmt: skip
def test_per_node_gives_the_command_its_node(
    tmp_path: Path, platform: str, env: dict[str, str], node: dict[str, str | None]
) -> None:
    root = sagemaker_root(tmp_path, "algo-2") if platform == "sagemaker" else tmp_path
    plan = plan_from_env(
        env, opts(launch="per_node", nproc_per_node=2, max_restarts=3), root=root, gpus_visible=0,
        free_port=lambda: 41234,
    )  # fmt: skip
    assert (plan.platform, plan.mode) == (platform, "per_node")
    assert node_vars(plan) == node
    # torchrun's own option defaults (a bare `torchrun train.py` needs no flags) and SkyPilot's names agree
    pet = {k: plan.env[f"PET_{k}"] for k in ("NNODES", "NODE_RANK", "NPROC_PER_NODE", "MASTER_ADDR", "MASTER_PORT")}
    assert pet == {k: node[k] for k in pet}
    assert plan.env["PET_MAX_RESTARTS"] == "3" and "SIGUSR1" in plan.env["PET_SIGNALS_TO_HANDLE"]
    assert (plan.env["SKYPILOT_NODE_RANK"], plan.env["SKYPILOT_NUM_NODES"]) == (node["NODE_RANK"], node["NNODES"])
    assert plan.env.get("SKYPILOT_NODE_IPS") == node["TRAINCTL_NODE_ADDRS"]
    assert plan.env["SKYPILOT_NUM_GPUS_PER_NODE"] == "0"
    # no per-process variable of the platform's reaches the command; torchrun sets them for its workers
    assert not {"RANK", "WORLD_SIZE", "LOCAL_RANK", "GROUP_RANK"} & (set(env) - set(plan.unset))
    assert plan.worker_prefix == [] and plan.torchrun_args()  # the plan still describes itself


def test_per_node_unsets_platform_and_torchrun_variables() -> None:
    env = {"RANK": "1", "WORLD_SIZE": "4", "PET_RDZV_ENDPOINT": "x:1", "TORCHELASTIC_RUN_ID": "a", "HOME": "/h",
           "SLURM_PROCID": "1", "LOCAL_WORLD_SIZE": "2"}  # fmt: skip
    assert per_node_unset(env) == ["LOCAL_WORLD_SIZE", "PET_RDZV_ENDPOINT", "RANK", "TORCHELASTIC_RUN_ID", "WORLD_SIZE"]


@pytest.mark.parametrize(
    ("env", "kw"),
    [
        ({"PET_NNODES": "1:3", "PET_RDZV_BACKEND": "c10d", "PET_RDZV_ENDPOINT": "w-0:29400"}, {}),
        ({"SLURM_JOB_ID": "9", "SLURM_JOB_NODELIST": "n[1-2]", "SLURM_NODEID": "1"}, {"nnodes": "1:2"}),
    ],
)
def test_per_node_refuses_an_elastic_rendezvous(tmp_path: Path, env: dict[str, str], kw: dict[str, Any]) -> None:
    with pytest.raises(TrainerInputError, match="no fixed node rank"):
        plan_from_env(env, opts(launch="per_node", **kw), root=tmp_path)


def test_per_node_outside_the_sagemaker_distribution_groups_runs_once(tmp_path: Path) -> None:
    (tmp_path / sm.RESOURCE_CONFIG).parent.mkdir(parents=True)
    config = {
        "current_host": "algo-2", "current_group_name": "data", "hosts": ["algo-1", "algo-2"],
        "instance_groups": [{"instance_group_name": "train", "instance_type": "ml.c5.xlarge", "hosts": ["algo-1"]},
                            {"instance_group_name": "data", "instance_type": "ml.c5.xlarge", "hosts": ["algo-2"]}],
    }  # fmt: skip
    (tmp_path / sm.RESOURCE_CONFIG).write_text(json.dumps(config))
    hp = {"sagemaker_distribution_instance_groups": '["train"]', "trainctl_command": json.dumps(PROG)}
    (tmp_path / sm.HYPERPARAMETERS).write_text(json.dumps(hp))
    plan = plan_from_env({}, LaunchOptions(launch="per_node"), root=tmp_path)
    assert plan.mode == "process" and "NNODES" not in plan.env


def torchrun_worker(rank: int, local: int, world: int, local_world: int, group: int, **slurm: str) -> dict[str, str]:
    """A torchrun worker's environment on SLURM: its agent's task variables (one task per node) and torchrun's."""
    return {
        "RANK": str(rank), "LOCAL_RANK": str(local), "WORLD_SIZE": str(world), "LOCAL_WORLD_SIZE": str(local_world),
        "GROUP_RANK": str(group), "SLURM_PROCID": str(group), "SLURM_LOCALID": "0", "SLURM_NODEID": str(group),
        "SLURM_NTASKS": str(world // local_world), **slurm,
    }  # fmt: skip


@pytest.mark.parametrize(
    ("env", "expected"),
    [
        # the report of issue 29: RANK=2 LOCAL_RANK=0 WORLD_SIZE=4 with SLURM_PROCID=1 SLURM_NTASKS=2
        (torchrun_worker(2, 0, 4, 2, 1),
         {"SLURM_PROCID": "2", "SLURM_LOCALID": "0", "SLURM_NODEID": "1", "SLURM_NTASKS": "4",
          "SLURM_NTASKS_PER_NODE": "2"}),
        # what SLURM set besides follows: the tasks per node, this node's task ids, the old names
        (torchrun_worker(3, 1, 4, 2, 1, SLURM_NPROCS="2", SLURM_STEP_NUM_TASKS="2", SLURM_TASKS_PER_NODE="1(x2)",
                         SLURM_STEP_TASKS_PER_NODE="1(x2)", SLURM_GTIDS="1"),
         {"SLURM_PROCID": "3", "SLURM_LOCALID": "1", "SLURM_NODEID": "1", "SLURM_NTASKS": "4",
          "SLURM_NTASKS_PER_NODE": "2", "SLURM_NPROCS": "4", "SLURM_STEP_NUM_TASKS": "4",
          "SLURM_TASKS_PER_NODE": "2(x2)", "SLURM_STEP_TASKS_PER_NODE": "2(x2)", "SLURM_GTIDS": "2,3"}),
        # one node of 2 processes
        (torchrun_worker(1, 1, 2, 2, 0, SLURM_TASKS_PER_NODE="1"),
         {"SLURM_PROCID": "1", "SLURM_LOCALID": "1", "SLURM_NODEID": "0", "SLURM_NTASKS": "2",
          "SLURM_NTASKS_PER_NODE": "2", "SLURM_TASKS_PER_NODE": "2"}),
        # not a torchrun worker: nothing to agree with
        ({"SLURM_PROCID": "1"}, {}),
    ],
)  # fmt: skip
def test_torchrun_workers_see_slurm_task_variables_that_agree(env: dict[str, str], expected: dict[str, str]) -> None:
    assert worker_task_env(env) == expected


def test_slurm_worker_execs_the_program_with_agreeing_variables(tmp_path: Path) -> None:
    env = clean_env(tmp_path, **torchrun_worker(2, 0, 4, 2, 1))
    show = "import os; print(os.environ['SLURM_PROCID'], os.environ['SLURM_NTASKS'], os.getpid())"
    child = subprocess.Popen(
        [PY, "-m", "trainer.slurm_worker", "--", PY, "-c", show], env=env, stdout=subprocess.PIPE, text=True
    )
    out, _ = child.communicate(timeout=60)
    procid, ntasks, pid = out.split()
    assert (procid, ntasks) == ("2", "4")
    assert int(pid) == child.pid  # exec: the worker's pid is the program's (torchrun's signals reach it)


def test_dry_run_per_node_and_srun(tmp_path: Path) -> None:
    env = clean_env(tmp_path, **srun_task(3, 1, 1, MASTER_ADDR="n1", MASTER_PORT="20077"))
    out = subprocess.run(
        launch_cmd("--launch", "srun", "--dry-run", "--", *PROG), env=env, capture_output=True, text=True, timeout=60
    )
    plan = json.loads(out.stdout)
    assert plan["mode"] == "srun" and plan["env"]["RANK"] == "3" and plan["torchrun_args"] is None
    bad = subprocess.run(launch_cmd("--launch", "srun", "--", *PROG), env=clean_env(tmp_path), capture_output=True,
                         text=True, timeout=60)  # fmt: skip
    assert bad.returncode == 2 and "--launch srun: this is no SLURM task" in bad.stderr


def test_per_node_runs_the_command_once_with_its_node(tmp_path: Path) -> None:
    """The local platform, for real: one process (no torchrun of ours), the node's variables, a free port."""
    show = "import os, json; print(json.dumps({k: os.environ.get(k) for k in ('NNODES', 'NODE_RANK', 'MASTER_ADDR', 'MASTER_PORT', 'PET_NPROC_PER_NODE', 'RANK')}))"
    out = subprocess.run(
        launch_cmd("--launch", "per_node", "--nproc-per-node", "2", "--", PY, "-c", show),
        env=clean_env(tmp_path, RANK="7"), capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    seen = json.loads(out.stdout.strip().splitlines()[-1])
    assert seen["NNODES"] == "1" and seen["NODE_RANK"] == "0" and seen["MASTER_ADDR"] == "127.0.0.1"
    assert int(seen["MASTER_PORT"]) > 0 and seen["PET_NPROC_PER_NODE"] == "2" and seen["RANK"] is None
    assert "your command once per node: node 0, master 127.0.0.1:" in out.stderr
    assert os.environ.get("NNODES") is None  # nothing leaked into the test

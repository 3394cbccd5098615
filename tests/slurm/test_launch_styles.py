"""Scripts as users already launch them, on the real cluster (issue 29): 2 nodes x 2 processes.

- A script written the way cluster guides teach (rank from SLURM_PROCID/SLURM_LOCALID/SLURM_NTASKS, master from
  `scontrol show hostnames`) with `slurm.launch: srun`, and under trainctl's own torchrun (the default), where
  each worker's SLURM task variables are made to agree with its rank: ranks 0-3, world 4, all-reduce 6, across
  the netns cluster's hosts.
- A Lightning DDP script in both modes: SLURMEnvironment for srun tasks, TorchElasticEnvironment under torchrun.
- `launch: per_node` with the user's own `torchrun --nnodes 2 --nproc-per-node 2 train.py`, across hosts.
- `slurm.launch: srun` with `code:`: every task verifies the bundle, the program runs in the run's work/.
"""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path
from typing import Any

import pytest
from slurm_cluster import Cluster, master_of
from trainctl import Job, Run
from trainctl.submit.bundle import bundle_for

pytestmark = [pytest.mark.slurm, pytest.mark.slow]
ROOT = Path(__file__).resolve().parents[2]
PROGRAMS = ROOT / "tests" / "programs"
LAUNCHES = ["srun", "torchrun"]


def job_of(name: str, command: list[str], workdir: Path, slurm_launch: str = "torchrun", **more: Any) -> Job:
    return Job.parse({
        "name": name, "command": command, "resources": {"nodes": 2, "procs_per_node": 2},
        "slurm": {"python_env": sys.prefix, "workdir": str(workdir), "launch": slurm_launch}, **more,
    })  # fmt: skip


def finished(run: Run, timeout: float = 400) -> str:
    final = run.wait(timeout=timeout, poll=0.5)
    log = "\n".join(run.logs())
    assert final.state.value == "succeeded", log[-5000:]
    return log


def read_ranks(run: Run, pattern: str) -> list[dict[str, Any]]:
    return [json.loads(p.read_text()) for p in sorted(Path(run.paths.output_dir).glob(pattern))]


def met_at_the_master(cluster: Cluster, seen: set[tuple[str, str, str]], nodes: list[str]) -> str:
    """The second node's processes held TCP connections to the first node's own (namespace) address."""
    master_ip = cluster.addresses[nodes[0]]
    assert any(n == nodes[1] and peer.startswith(master_ip + ":") for n, _, peer in seen), sorted(seen)
    return master_ip


@pytest.mark.parametrize("launch", LAUNCHES)
def test_a_script_that_reads_slurm_task_variables_meets_across_hosts(
    netns_cluster: Cluster, tmp_path: Path, home: Path, launch: str
) -> None:
    job = job_of(f"guide-{launch}", ["python", str(PROGRAMS / "slurm_style.py")], tmp_path / "w", launch)
    with netns_cluster.watch_connections() as seen:
        run = job.submit("slurm")
        log = finished(run)
    ranks = read_ranks(run, "slurm-style-rank-*.json")
    assert [r["rank"] for r in ranks] == [0, 1, 2, 3], log[-4000:]
    master = master_of(log)
    nodes = [r["host"] for r in ranks]
    assert nodes[0] == nodes[1] == master.name != nodes[2] == nodes[3], nodes  # two ranks per node, in order
    for r in ranks:
        assert (r["world"], r["sum"], r["ranks"], r["master"]) == (4, 6.0, [0, 1, 2, 3], master.name), r
        env = r["env"]
        # trainctl's variables and SLURM's agree within each process, in both modes
        assert (env["RANK"], env["LOCAL_RANK"], env["WORLD_SIZE"]) == (
            env["SLURM_PROCID"], env["SLURM_LOCALID"], env["SLURM_NTASKS"]
        ), env  # fmt: skip
        assert (
            env["LOCAL_WORLD_SIZE"] == env["SLURM_NTASKS_PER_NODE"] == "2" and env["GROUP_RANK"] == env["SLURM_NODEID"]
        )
        assert (env["TORCHELASTIC_RUN_ID"] is None) == (launch == "srun"), env  # srun mode: no torchrun at all
    ip = met_at_the_master(netns_cluster, seen, [nodes[0], nodes[2]])
    assert log.count("srun task rank") == (4 if launch == "srun" else 0), log[-4000:]
    print(f"slurm-style script, slurm.launch {launch}: ranks 0-3 on {nodes[0]}, {nodes[2]}; master {master.name}={ip}")


@pytest.mark.parametrize("launch", LAUNCHES)
def test_a_lightning_script_sees_world_four(cluster: Cluster, tmp_path: Path, home: Path, launch: str) -> None:
    job = job_of(
        f"lightning-{launch}", ["python", str(PROGRAMS / "lightning_ddp.py"), "2", "2"], tmp_path / "w", launch
    )
    run = job.submit("slurm")
    log = finished(run, timeout=600)
    ranks = read_ranks(run, "lightning-rank-*.json")
    expected = "SLURMEnvironment" if launch == "srun" else "TorchElasticEnvironment"
    assert [r["global_rank"] for r in ranks] == [0, 1, 2, 3], log[-4000:]
    for r in ranks:
        assert (r["environment"], r["world_size"], r["steps"]) == (expected, 4, 5), r
        assert r["node_rank"] == r["global_rank"] // 2 and r["local_rank"] == r["global_rank"] % 2, r
    print(f"lightning under slurm.launch {launch}: {expected}, world 4, ranks 0-3")


def test_per_node_runs_the_users_torchrun_once_per_node(netns_cluster: Cluster, tmp_path: Path, home: Path) -> None:
    command = ["torchrun", "--nnodes", "2", "--nproc-per-node", "2", "train.py"]
    job = job_of("own-torchrun", command, tmp_path / "w", launch="per_node", code=str(PROGRAMS / "per_node"))
    with netns_cluster.watch_connections() as seen:
        run = job.submit("slurm")
        log = finished(run)
    result = json.loads((Path(run.paths.output_dir) / "result.json").read_text())
    assert result["world_size"] == 4 and result["cwd"] == str(Path(run.paths.output_dir).parent / "work"), result
    master = master_of(log)
    hosts = [r["host"] for r in result["ranks"]]
    assert hosts[0] == hosts[1] == master.name != hosts[2] == hosts[3], hosts
    for r in result["ranks"]:
        node = r["node"]
        assert (node["NNODES"], node["NPROC_PER_NODE"], node["MASTER_ADDR"]) == ("2", "2", master.name), node
        assert node["NODE_RANK"] == str(r["rank"] // 2) == node["SKYPILOT_NODE_RANK"], node
        assert node["TRAINCTL_NODE_ADDRS"].split("\n") == [hosts[0], hosts[2]], node
        assert node["MASTER_PORT"] == str(master.port) and r["torchelastic"], node
    assert (Path(run.paths.checkpoint_dir) / "model.pt").is_file()
    assert log.count("your command once per node") == 2 and "platform slurm, your command once per node: node 1" in log
    ip = met_at_the_master(netns_cluster, seen, [hosts[0], hosts[2]])
    print(f"per_node torchrun on {hosts[0]}, {hosts[2]}: world 4, master {master.name}={ip}:{master.port}")


def test_srun_mode_ships_code_to_every_task(cluster: Cluster, tmp_path: Path, home: Path) -> None:
    folder = tmp_path / "code-job"
    shutil.copytree(ROOT / "examples" / "code-job", folder)
    job = Job.from_yaml(folder / "job.yaml").with_overrides(
        ["resources.nodes=2", f"slurm.python_env={sys.prefix}", f"slurm.workdir={tmp_path / 'runs'}",
         "slurm.launch=srun"]
    )  # fmt: skip
    bundle = bundle_for(job)
    assert bundle is not None and job.resources.nprocs == 2
    run = job.submit("slurm")
    log = finished(run)
    result = json.loads((Path(run.paths.output_dir) / "result.json").read_text())
    assert result["greeting"] == "hello from helper.py" and result["world_size"] == 4, result
    assert result["code_dir"] == str(Path(run.paths.output_dir).parent / "work")
    assert log.count(f"code sha256 {bundle.sha256} verified") == 4, log[-4000:]  # one launcher per task
    assert log.count("srun task rank") == 4

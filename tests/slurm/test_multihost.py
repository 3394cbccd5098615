"""Multi-node jobs on the --netns cluster (`netns_cluster`: scripts/slurm-cluster.sh --netns 3 4), where every
node is a host of its own: the ranks must meet at the first node's own address, never loopback, and talk to
each other across namespaces through the bridge. Paths come from the run's record, not from the workdir."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import torch
import yaml
from slurm_cluster import Cluster, Master, master_of
from trainctl import Job, Run
from trainctl.submit.bundle import bundle_for
from trainer.launcher.hostlist import expand_hostlist

pytestmark = [pytest.mark.slurm, pytest.mark.slow]
ROOT = Path(__file__).resolve().parents[2]


def _root_addresses() -> set[str]:
    out = subprocess.run(["ip", "-4", "-o", "addr", "show"], capture_output=True, text=True, check=True).stdout
    return {line.split()[3].split("/")[0] for line in out.splitlines()}


def assert_across_hosts(cluster: Cluster, run: Run, seen: set[tuple[str, str, str]]) -> tuple[Master, list[str]]:
    """The job's master is its first node's namespace address (not loopback, not this host's), every other
    node held TCP connections to that address (the workers' store and gloo pairs; the rendezvous port itself
    is used by the agents only while they meet) and every two nodes one to each other."""
    log = "\n".join(run.logs())
    master = master_of(log)
    nodes = expand_hostlist(master.nodelist)
    assert len(nodes) >= 2 and set(nodes) <= set(cluster.nodes), master
    assert master.name == nodes[0], master
    assert not master.loopback, f"{master.name} resolves to loopback {master.address}"
    assert master.address == cluster.addresses[master.name], master
    assert master.address in cluster.addresses_on(master.name), "the master's address is not inside its node"
    assert master.address not in _root_addresses(), "the master's address is this host's, not the node's"
    ip = {node: cluster.addresses[node] for node in nodes}
    for node in nodes[1:]:
        assert any(
            n == node and local.startswith(ip[node] + ":") and peer.startswith(master.address + ":")
            for n, local, peer in seen
        ), f"{node} never connected to the master {master.address}: {sorted(seen)}"
    for a in nodes:
        for b in nodes:
            if a != b:
                assert any(
                    n == a and local.startswith(ip[a] + ":") and peer.startswith(ip[b] + ":") for n, local, peer in seen
                ), f"no connection from {a} to {b} seen: {sorted(seen)}"
    return master, nodes


def test_digits_two_nodes_by_two_processes_meet_across_hosts(
    netns_cluster: Cluster, digits_data: Path, tmp_path: Path, home: Path
) -> None:
    data = yaml.safe_load((ROOT / "examples" / "digits.yaml").read_text())
    data["resources"] = {"nodes": 2, "procs_per_node": 2}
    data["data"] = {"train": str(digits_data / "train.jsonl"), "val": str(digits_data / "val.jsonl")}
    data["slurm"] = {"python_env": sys.prefix, "workdir": str(tmp_path / "w")}
    with netns_cluster.watch_connections() as seen:
        run = Job.parse(data).submit("slurm")
        final = run.wait(timeout=400, poll=0.5)
    assert final.state.value == "succeeded", "\n".join(run.logs())[-4000:]
    master, nodes = assert_across_hosts(netns_cluster, run, seen)
    summary = json.loads((Path(run.paths.output_dir) / "summary.json").read_text())
    assert summary["world_size"] == 4 and summary["val_accuracy"] > 0.9, summary
    print(f"digits 2x2 on {nodes}: master {master.name}={master.address}:{master.port}, acc {summary['val_accuracy']}")


def test_code_job_ships_and_runs_across_hosts(netns_cluster: Cluster, tmp_path: Path, home: Path) -> None:
    folder = tmp_path / "code-job"
    shutil.copytree(ROOT / "examples" / "code-job", folder)
    job = Job.from_yaml(folder / "job.yaml").with_overrides(
        ["resources.nodes=2", f"slurm.python_env={sys.prefix}", f"slurm.workdir={tmp_path / 'runs'}"]
    )
    assert job.resources.procs_per_node == 2
    bundle = bundle_for(job)
    assert bundle is not None
    with netns_cluster.watch_connections() as seen:
        run = job.submit("slurm")
        final = run.wait(timeout=300, poll=0.5)
    log = "\n".join(run.logs())
    assert final.state.value == "succeeded", log[-4000:]
    master, nodes = assert_across_hosts(netns_cluster, run, seen)
    result = json.loads((Path(run.paths.output_dir) / "result.json").read_text())
    assert result["greeting"] == "hello from helper.py" and result["world_size"] == 4, result
    assert result["code_sha256"] == bundle.sha256
    assert log.count(f"code sha256 {bundle.sha256} verified") == 2, log  # one launcher per node, each on its host
    print(f"code-job 2x2 on {nodes}: master {master.name}={master.address}, sha256 {bundle.sha256[:12]} verified twice")


def _newest(folder: Path) -> Path:
    return sorted(folder.glob("step-*"))[-1]


def test_local_run_resumed_across_hosts_is_bit_identical(
    netns_cluster: Cluster, digits_data: Path, tmp_path: Path, home: Path, resume_helpers: Any, killed_source: Any
) -> None:
    """A 2-process local run killed after its first checkpoint continues on the netns cluster as 2 nodes x 1
    (issue 18's cross-target resume, here with real hosts) and ends with the uninterrupted run's weights."""
    whole = Job.parse(resume_helpers.job(digits_data, "whole", 2)).submit("local")
    assert whole.wait(timeout=300, poll=0.5).state.value == "succeeded", "\n".join(whole.logs())
    source = killed_source.recorded()

    data = resume_helpers.job(digits_data, "moved", 1, slurm={"python_env": sys.prefix, "workdir": str(tmp_path / "w")})
    data["resources"] = {"nodes": 2, "procs_per_node": 1}
    with netns_cluster.watch_connections() as seen:
        run = Job.parse(data).submit("slurm", resume_from=source)
        final = run.wait(timeout=400, poll=0.5)
    log = "\n".join(run.logs())
    assert final.state.value == "succeeded", log[-4000:]
    master, nodes = assert_across_hosts(netns_cluster, run, seen)
    came = run.resumed_from.model_dump()
    assert came["run"] == source.id and f"at step {came['step']} " in log, log[-3000:]
    summary = run.summary()
    assert summary is not None and summary["world_size"] == 2 and summary["val_accuracy"] > 0.9, summary

    ours, theirs = _newest(Path(run.paths.checkpoint_dir)), _newest(Path(whole.paths.checkpoint_dir))
    assert ours.name == theirs.name
    a = torch.load(ours / "state.pt", map_location="cpu", weights_only=True)["model"]
    b = torch.load(theirs / "state.pt", map_location="cpu", weights_only=True)["model"]
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in b), "weights differ from the whole run"
    print(f"local 2 -> {nodes} 2x1 from step {came['step']}: master {master.address}, {len(b)} tensors equal")

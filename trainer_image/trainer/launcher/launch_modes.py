"""The launcher's modes besides starting torchrun, pure (a mapping in, variables out; tables in tests).

- `srun` (`slurm.launch: srun`): SLURM started this process as one task per process, as submitit and the
  cluster guides do (`srun --ntasks-per-node=<GPUs>`): torch's variables come from SLURM's task variables,
  so both agree, and the program runs with no torchrun.
- `per_node` (`launch: per_node`): the user's own launcher (`torchrun ...`, `accelerate launch ...`,
  `deepspeed ...`) once per node, with the node's variables under the names those tools read.
- torchrun on SLURM: torchrun (torch/distributed/run.py) reads no SLURM variable and passes the agent's
  environment to every worker, so each worker would inherit its node's task, `SLURM_PROCID` = node index
  and `SLURM_NTASKS` = node count; `worker_task_env` rewrites them from torchrun's RANK & co.
  (`python -m trainer.slurm_worker` applies it in each worker; docs/slurm.md says why not remove them).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence

from ..errors import TrainerInputError
from .launch_plan import DEFAULT_MASTER_PORT, FORWARDED_SIGNALS, LaunchOptions, LaunchPlan

MODES = ("torchrun", "srun", "per_node")
"""`trainer-launch --launch MODE` (docs/contracts.md section 1)."""

TORCH_TASK_KEYS = ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "GROUP_RANK")
"""Per-process variables torchrun gives each worker; a node-level command must not inherit a platform's."""

NODE_KEYS = ("NNODES", "NODE_RANK", "NPROC_PER_NODE", "TRAINCTL_NODE_ADDRS")
"""Names per_node mode sets besides MASTER_ADDR/MASTER_PORT and torchrun's and SkyPilot's (docs/your-program.md)."""
NODE_ADDRS_ENV = "TRAINCTL_NODE_ADDRS"
"""The nodes' addresses, one per line, the first one the master's (also the SDK's input on Kubernetes, where
no platform variable lists the pods)."""

_COUNT = re.compile(r"^(\d+)(?:\(x(\d+)\))?$")


def tasks_per_node(text: str) -> list[int]:
    """SLURM's compressed per-node task counts, `2(x3),1` -> [2, 2, 2, 1] (srun(1): SLURM_TASKS_PER_NODE)."""
    counts: list[int] = []
    for part in filter(None, text.strip().split(",")):
        found = _COUNT.match(part.strip())
        if not found:
            raise TrainerInputError(f"tasks per node {text!r}: expected counts such as '2(x3),1'")
        counts += [int(found.group(1))] * int(found.group(2) or 1)
    return counts


def _need_int(env: Mapping[str, str], key: str) -> int:
    value = env.get(key, "").strip()
    if not value.isdigit():
        raise TrainerInputError(
            f"--launch srun: {key}={value!r}; SLURM sets it for each task of `srun --ntasks-per-node=N` "
            "(run the launcher under srun, one task per process)"
        )
    return int(value)


def local_task_count(env: Mapping[str, str], node: int) -> int:
    """Tasks of this step on node `node`: the step's list, else the job's, else --ntasks-per-node's value."""
    for key in ("SLURM_STEP_TASKS_PER_NODE", "SLURM_TASKS_PER_NODE"):
        counts = tasks_per_node(env.get(key, ""))
        if node < len(counts):
            return counts[node]
    return _need_int(env, "SLURM_NTASKS_PER_NODE")


def srun_task_env(env: Mapping[str, str], hosts: Sequence[str], default_port: int) -> dict[str, str]:
    """torch's variables of one srun task, from SLURM's: RANK = SLURM_PROCID, LOCAL_RANK = SLURM_LOCALID,
    WORLD_SIZE = SLURM_NTASKS, GROUP_RANK = SLURM_NODEID (what Lightning's SLURMEnvironment and submitit's
    SlurmJobEnvironment read), the master the allocation's first node (as `scontrol show hostnames | head -1`)
    unless the batch script exported MASTER_ADDR/MASTER_PORT."""
    rank, local, world = (_need_int(env, k) for k in ("SLURM_PROCID", "SLURM_LOCALID", "SLURM_NTASKS"))
    node = _need_int(env, "SLURM_NODEID")
    master = env.get("MASTER_ADDR") or (hosts[0] if hosts else "")
    if not master:
        raise TrainerInputError("--launch srun: no MASTER_ADDR and no SLURM_JOB_NODELIST to take the first node from")
    port = env.get("MASTER_PORT", "").strip() or str(default_port)
    return {
        "RANK": str(rank),
        "LOCAL_RANK": str(local),
        "WORLD_SIZE": str(world),
        "LOCAL_WORLD_SIZE": str(local_task_count(env, node)),
        "GROUP_RANK": str(node),
        "MASTER_ADDR": master,
        "MASTER_PORT": port,
    }


def per_node_env(
    *, nnodes: int, node_rank: int, nproc: int, master: str, port: int, hosts: Sequence[str], gpus: int, restarts: int
) -> dict[str, str]:
    """What the user's launcher gets on each node: plain names (NNODES, NODE_RANK, NPROC_PER_NODE, MASTER_ADDR,
    MASTER_PORT: DeepSpeed's and Megatron's launch scripts read these), torchrun's own PET_<OPTION> defaults
    (torch/distributed/argparse_util.py `env`: a bare `torchrun train.py` needs no flags, as under Kubeflow),
    and SkyPilot's (sky/skylet/constants.py: SKYPILOT_NODE_RANK, SKYPILOT_NUM_NODES, SKYPILOT_NODE_IPS one per
    line, SKYPILOT_NUM_GPUS_PER_NODE), so a script written for either runs unchanged."""
    listed = "\n".join(hosts)
    env = {
        "NNODES": str(nnodes),
        "NODE_RANK": str(node_rank),
        "NPROC_PER_NODE": str(nproc),
        "MASTER_ADDR": master,
        "MASTER_PORT": str(port),
        "PET_NNODES": str(nnodes),
        "PET_NODE_RANK": str(node_rank),
        "PET_NPROC_PER_NODE": str(nproc),
        "PET_MASTER_ADDR": master,
        "PET_MASTER_PORT": str(port),
        "PET_MAX_RESTARTS": str(restarts),
        "PET_SIGNALS_TO_HANDLE": FORWARDED_SIGNALS,  # SIGUSR1 too, as trainctl's own torchrun: SLURM's warning
        "SKYPILOT_NODE_RANK": str(node_rank),
        "SKYPILOT_NUM_NODES": str(nnodes),
        "SKYPILOT_NUM_GPUS_PER_NODE": str(gpus),
    }
    if listed:
        env[NODE_ADDRS_ENV] = listed
        env["SKYPILOT_NODE_IPS"] = listed
    return env


def srun_plan(env: Mapping[str, str], opts: LaunchOptions, hosts: list[str]) -> LaunchPlan:
    """`--launch srun`: this process is one of SLURM's tasks; the program runs with torch's variables from them."""
    if opts.nnodes is not None or opts.max_restarts:
        raise TrainerInputError(
            "--launch srun: SLURM starts every process itself, so there is no torchrun to make the job elastic "
            "(--nnodes) or restart workers (--max-restarts); use the job's retries"
        )
    task = srun_task_env(env, hosts, DEFAULT_MASTER_PORT)
    local_world = int(task["LOCAL_WORLD_SIZE"])
    if opts.nproc_per_node is not None and opts.nproc_per_node != local_world:
        raise TrainerInputError(
            f"--launch srun: SLURM started {local_world} task(s) on this node, the job asks for "
            f"{opts.nproc_per_node} process(es) per node (--nproc-per-node): srun needs --ntasks-per-node="
            f"{opts.nproc_per_node}"
        )
    nodes = env.get("SLURM_STEP_NUM_NODES", "") or env.get("SLURM_NNODES", "")
    return LaunchPlan(
        platform="slurm",
        mode="srun",
        program=list(opts.program),
        nnodes=nodes if nodes.isdigit() else str(len(hosts)),
        nproc_per_node=local_world,
        node_rank=int(task["GROUP_RANK"]),
        master_addr=task["MASTER_ADDR"],
        master_port=int(task["MASTER_PORT"]),
        hosts=hosts,
        env=task,
    )


def per_node_unset(env: Mapping[str, str]) -> list[str]:
    """The platform's own per-process and torchrun variables, which would contradict the user's launcher
    (a PyTorchJob pod has RANK = its pod index and WORLD_SIZE; a TrainJob pod PET_* of trainctl's torchrun)."""
    return sorted(k for k in env if k in TORCH_TASK_KEYS or k.startswith(("PET_", "TORCHELASTIC_")))


def per_node_plan(plan: LaunchPlan, env: Mapping[str, str], gpus: int, free_port: Callable[[], int]) -> LaunchPlan:
    """`--launch per_node`: the platform's torchrun plan for this node, turned into the program once with the
    node's variables (`per_node_env`) instead of trainctl's torchrun."""
    if plan.mode == "process":
        return plan  # a SageMaker host outside the distribution groups runs the program once anyway
    if ":" in plan.nnodes or plan.node_rank is None:
        raise TrainerInputError(
            f"--launch per_node: {plan.platform} gives no fixed node rank (nodes {plan.nnodes}, an elastic "
            "rendezvous); give the job a fixed node count, and your launcher its own elastic options"
        )
    single = plan.standalone  # one node: this machine's loopback and a port nothing holds
    master = "127.0.0.1" if single else str(plan.master_addr)
    port = free_port() if single else int(plan.master_port or DEFAULT_MASTER_PORT)
    hosts = plan.hosts or ([master] if single else [])
    plan.env.update(
        per_node_env(
            nnodes=int(plan.nnodes), node_rank=plan.node_rank, nproc=plan.nproc_per_node, master=master, port=port,
            hosts=hosts, gpus=gpus, restarts=plan.max_restarts,
        )
    )  # fmt: skip
    plan.mode, plan.unset, plan.worker_prefix = "per_node", per_node_unset(env), []
    plan.master_addr, plan.master_port, plan.wait_for = master, port, None if single else plan.wait_for
    return plan


def _slurm_counts(per_node: int, nodes: int) -> str:
    return f"{per_node}(x{nodes})" if nodes > 1 else str(per_node)


def worker_task_env(env: Mapping[str, str]) -> dict[str, str]:
    """For a torchrun worker on SLURM: SLURM's task variables as if srun had started this worker as a task of
    its own (SLURM_PROCID = RANK, SLURM_LOCALID = LOCAL_RANK, SLURM_NTASKS = WORLD_SIZE, SLURM_NODEID =
    GROUP_RANK, tasks per node = LOCAL_WORLD_SIZE). Empty outside torchrun (no RANK): nothing to agree with.
    Variables SLURM did not set stay unset, except SLURM_NTASKS_PER_NODE, which Lightning's SLURMEnvironment
    requires beside SLURM_NTASKS > 1."""
    keys = ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "GROUP_RANK")
    if not all(env.get(k, "").isdigit() for k in keys):
        return {}
    rank, local, world, local_world, group = (int(env[k]) for k in keys)
    nodes = max(1, world // max(1, local_world))
    first = rank - local
    out = {
        "SLURM_PROCID": str(rank),
        "SLURM_LOCALID": str(local),
        "SLURM_NODEID": str(group),
        "SLURM_NTASKS": str(world),
        "SLURM_NTASKS_PER_NODE": str(local_world),
    }
    optional = {
        "SLURM_NPROCS": str(world),
        "SLURM_STEP_NUM_TASKS": str(world),
        "SLURM_TASKS_PER_NODE": _slurm_counts(local_world, nodes),
        "SLURM_STEP_TASKS_PER_NODE": _slurm_counts(local_world, nodes),
        "SLURM_GTIDS": ",".join(str(first + i) for i in range(local_world)),
    }
    out.update({k: v for k, v in optional.items() if k in env})
    return out

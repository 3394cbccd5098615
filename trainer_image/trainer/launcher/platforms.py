"""Environment -> launch plan. Pure: one function per platform, no processes, no network.

Every platform ends in the same torchrun invocation; only where nnodes, the node rank and
the rendezvous come from differs. The other launch modes (`--launch srun`, `per_node`) start from the
same facts (launch_modes.py). Tests feed a dict (and SageMaker files under a tmp root).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from pathlib import Path

from ..errors import TrainerInputError
from .hostlist import expand_hostlist
from .launch_modes import MODES, NODE_ADDRS_ENV, NODE_KEYS, per_node_plan, srun_plan
from .launch_plan import DEFAULT_MASTER_PORT, LaunchOptions, LaunchPlan
from .sagemaker import files as sm
from .sagemaker import toolkit_env as smenv
from .sagemaker.toolkit_env import HostFacts

PLATFORM_PREFIXES = ("SLURM_", "PET_", "SM_", "TORCHELASTIC_", "SKYPILOT_")
PLATFORM_KEYS = frozenset(
    {"MASTER_ADDR", "MASTER_PORT", "WORLD_SIZE", "RANK", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "GROUP_RANK", *NODE_KEYS}
)
"""The one list of variables by which a platform (or torchrun) describes a job to the launcher and
its workers. `--platform local` drops them, so a local run started from inside a SLURM job, a pod
or torchrun is one node on this machine; the SDK's local target relies on that."""


def _int(env: Mapping[str, str], key: str) -> int | None:
    value = env.get(key, "").strip()
    if not value:
        return None
    try:
        return int(value)
    except ValueError as exc:
        raise TrainerInputError(f"environment {key}={value!r} is not an integer") from exc


def _nproc(opts: LaunchOptions, platform_value: int | None, gpus_visible: int) -> int:
    """The job's value, else the platform's, else GPUs visible, else 1."""
    for candidate in (opts.nproc_per_node, platform_value, gpus_visible):
        if candidate is not None and candidate > 0:
            return candidate
    return 1


def _finish(
    plan: LaunchPlan, opts: LaunchOptions, nnodes: int, rdzv_id: str | None, default_port: int | None
) -> LaunchPlan:
    """Apply the shared rules: elastic -> c10d, a single fixed node -> local standalone rendezvous."""
    plan.nnodes = opts.nnodes or str(nnodes)
    plan.max_restarts = opts.max_restarts
    plan.rdzv_id = rdzv_id
    plan.master_port = opts.master_port or default_port or DEFAULT_MASTER_PORT
    elastic = ":" in plan.nnodes
    plan.rdzv_backend = opts.rdzv_backend or ("c10d" if elastic else "static")
    single = plan.nnodes == "1" and opts.master_port is None and opts.rdzv_backend is None
    if single:
        # One node needs no master: a free localhost port avoids clashes and DNS entirely.
        plan.standalone = True
        plan.rdzv_backend = "c10d"
        plan.rdzv_endpoint = "localhost:0"
        plan.node_rank = 0
        plan.master_addr = None
        plan.master_port = None
        return plan
    if plan.master_addr is None:
        raise TrainerInputError(f"{plan.platform}: {plan.nnodes} nodes but no master address is known")
    if plan.rdzv_backend == "c10d":
        plan.rdzv_endpoint = plan.rdzv_endpoint or f"{plan.master_addr}:{plan.master_port}"
        plan.node_rank = None
    elif plan.node_rank is None:
        raise TrainerInputError(f"{plan.platform}: static rendezvous needs this node's rank")
    host = plan.rdzv_endpoint.rsplit(":", 1)[0] if plan.rdzv_endpoint else plan.master_addr
    port = int(plan.rdzv_endpoint.rsplit(":", 1)[1]) if plan.rdzv_endpoint else plan.master_port
    plan.wait_for = (host, int(port))
    return plan


def is_platform_variable(name: str) -> bool:
    return name.startswith(PLATFORM_PREFIXES) or name in PLATFORM_KEYS


def without_platform(env: Mapping[str, str]) -> dict[str, str]:
    """`env` minus every platform variable."""
    return {k: v for k, v in env.items() if not is_platform_variable(k)}


def detect_platform(env: Mapping[str, str], root: Path) -> str:
    if env.get("LOCAL_RANK") is not None or env.get("TORCHELASTIC_RUN_ID"):
        return "torchrun"
    if env.get("SLURM_JOB_ID") and (env.get("SLURM_JOB_NODELIST") or env.get("SLURM_NODELIST")):
        return "slurm"
    if env.get("PET_NNODES") or env.get("PET_MASTER_ADDR") or env.get("PET_RDZV_ENDPOINT"):
        return "kubeflow"
    if env.get("MASTER_ADDR") and env.get("WORLD_SIZE") and env.get("RANK"):
        return "kubeflow"
    if (root / sm.RESOURCE_CONFIG).exists():
        return "sagemaker"
    return "local"


def _slurm_hosts(env: Mapping[str, str]) -> list[str]:
    nodelist = env.get("SLURM_JOB_NODELIST") or env.get("SLURM_NODELIST") or ""
    hosts = expand_hostlist(nodelist)
    if not hosts:
        raise TrainerInputError(f"SLURM_JOB_NODELIST={nodelist!r} names no hosts")
    return hosts


def _slurm(env: Mapping[str, str], opts: LaunchOptions, gpus: int, python: str) -> LaunchPlan:
    hosts = _slurm_hosts(env)
    nnodes = _int(env, "SLURM_NNODES") or _int(env, "SLURM_JOB_NUM_NODES") or len(hosts)
    plan = LaunchPlan(
        platform="slurm",
        mode="torchrun",
        program=list(opts.program),
        nproc_per_node=_nproc(opts, None, gpus),
        node_rank=_int(env, "SLURM_NODEID") or 0,
        master_addr=hosts[0],
        hosts=hosts,
        # each worker's SLURM_PROCID & co. made to agree with its rank (launch_modes.worker_task_env)
        worker_prefix=[python, "-m", "trainer.slurm_worker", "--"],
    )
    return _finish(plan, opts, nnodes, env.get("SLURM_JOB_ID"), _int(env, "MASTER_PORT"))


def _kubeflow(env: Mapping[str, str], opts: LaunchOptions, gpus: int) -> LaunchPlan:
    if env.get("PET_NNODES") or env.get("PET_MASTER_ADDR") or env.get("PET_RDZV_ENDPOINT"):
        nnodes_text = env.get("PET_NNODES", "1").strip()
        nproc_text = env.get("PET_NPROC_PER_NODE", "").strip()
        plan = LaunchPlan(
            platform="kubeflow",
            mode="torchrun",
            program=list(opts.program),
            nproc_per_node=_nproc(opts, int(nproc_text) if nproc_text.isdigit() else None, gpus),
            node_rank=_int(env, "PET_NODE_RANK"),
            master_addr=env.get("PET_MASTER_ADDR") or env.get("MASTER_ADDR"),
            rdzv_endpoint=env.get("PET_RDZV_ENDPOINT") or None,
        )
        if env.get("PET_RDZV_BACKEND") and opts.rdzv_backend is None:
            opts = dataclasses.replace(opts, rdzv_backend=env["PET_RDZV_BACKEND"])
        if opts.nnodes is None and ":" in nnodes_text:
            opts = dataclasses.replace(opts, nnodes=nnodes_text)
        if plan.master_addr is None and plan.rdzv_endpoint:
            plan.master_addr = plan.rdzv_endpoint.rsplit(":", 1)[0]
        nnodes = int(nnodes_text) if nnodes_text.isdigit() else 1
        if plan.node_rank is None:
            plan.node_rank = _int(env, "RANK")
        plan.hosts = env.get(NODE_ADDRS_ENV, "").split()  # the SDK names the pods; the platform does not
        port = _int(env, "PET_MASTER_PORT") or _int(env, "MASTER_PORT")
        return _finish(plan, opts, nnodes, env.get("PET_RDZV_ID") or None, port)
    # The operator without torchrun settings: one launcher per pod, WORLD_SIZE pods.
    plan = LaunchPlan(
        platform="kubeflow",
        mode="torchrun",
        program=list(opts.program),
        nproc_per_node=_nproc(opts, None, gpus),
        node_rank=_int(env, "RANK"),
        master_addr=env["MASTER_ADDR"],
        hosts=env.get(NODE_ADDRS_ENV, "").split(),
    )
    return _finish(plan, opts, _int(env, "WORLD_SIZE") or 1, None, _int(env, "MASTER_PORT"))


def _sagemaker(
    env: Mapping[str, str], opts: LaunchOptions, gpus: int, root: Path, python: str, facts: HostFacts | None
) -> LaunchPlan:
    """Nodes, rank and master as the toolkit's torch_distributed runner computes them; SM_* as its Environment."""
    facts = facts or HostFacts(num_gpus=gpus)
    resource_config = sm.read_resource_config(root)
    raw_hp = sm.read_raw_hyperparameters(root)
    hp = smenv.decode_hyperparameters(raw_hp)
    props = smenv.environment(str(root / sm.ML), resource_config, sm.read_input_data_config(root), hp, env, facts)
    program, needs_code = list(opts.program), False
    if not program:
        program, needs_code = sm.program_from_hyperparameters(sm.read_hyperparameters(root), root, python)
    hosts, current = smenv.training_hosts(props), str(props["current_host"])
    default_nproc = props["additional_framework_parameters"].get("sagemaker_mpi_num_of_processes_per_host")
    plan = LaunchPlan(
        platform="sagemaker",
        mode="torchrun",
        program=program,
        nproc_per_node=_nproc(opts, _int(env, "SM_NUM_GPUS") or default_nproc, facts.num_gpus or props["num_neurons"]),
        node_rank=hosts.index(current) if current in hosts else None,
        master_addr=hosts[0] if hosts else None,
        failure_file=str(root / sm.FAILURE_FILE),
        hosts=hosts,
    )
    plan.env.update(smenv.sm_variables(props))
    plan.env.update(smenv.process_variables(hp, current, facts))
    for key, value in smenv.efa_variables(props["current_instance_type"], props["network_interface_name"]).items():
        if key not in env:  # a job's own setting wins
            plan.env[key] = value
    plan.env["TRAINER_CHECKPOINT_DIR"] = str(root / sm.CHECKPOINT_DIR)
    plan.env["TRAINER_OUTPUT_DIR"] = str(root / sm.MODEL_DIR)
    for channel in sm.channels(root):
        key = "TRAINER_DATA_" + "".join(c if c.isalnum() else "_" for c in channel.upper())
        plan.env[key] = str(root / sm.DATA_DIR / channel)
    if needs_code:
        local_code = sm.local_code_dir(hp, root)
        if local_code is None:
            plan.unpack.append((str(root / sm.CODE_TARBALL), str(root / sm.CODE_DIR)))
        plan.local_code = str(local_code) if local_code else None
        plan.cwd = str(local_code or root / sm.CODE_DIR)
    if current not in hosts:
        # outside the distribution instance groups the toolkit runs the script once, as a plain process
        # (sagemaker-pytorch-training-toolkit training.py: ProcessRunnerType unless the group distributes)
        plan.mode = "process"
        plan.nnodes, plan.nproc_per_node = "1", 1
        return plan
    rdzv_id = env.get("TRAINING_JOB_NAME") or "sagemaker"
    return _finish(plan, opts, len(hosts), rdzv_id, _int(env, "MASTER_PORT"))


def _torchrun_plan(
    platform: str, env: Mapping[str, str], opts: LaunchOptions, root: Path, gpus: int, python: str,
    facts: HostFacts | None,
) -> LaunchPlan:  # fmt: skip
    if platform == "sagemaker":
        return _sagemaker(env, opts, gpus, root, python, facts)
    if not opts.program:
        raise TrainerInputError("no PROGRAM given: use `trainer-launch [OPTIONS] -- PROGRAM [ARGS...]`")
    if platform == "slurm":
        return _slurm(env, opts, gpus, python)
    if platform == "kubeflow":
        return _kubeflow(env, opts, gpus)
    plan = LaunchPlan(
        platform="local",
        mode="torchrun",
        program=list(opts.program),
        nproc_per_node=_nproc(opts, None, gpus),
        node_rank=0,
        master_addr="127.0.0.1",
    )
    return _finish(plan, opts, 1, None, None)


def plan_from_env(
    env: Mapping[str, str],
    opts: LaunchOptions,
    root: Path = Path("/"),
    gpus_visible: int = 0,
    python: str = "python",
    sagemaker_facts: HostFacts | None = None,
    free_port: Callable[[], int] = lambda: DEFAULT_MASTER_PORT,
) -> LaunchPlan:
    """The launch plan for this node, from its environment (and SageMaker files under `root`)."""
    if opts.launch not in MODES:
        raise TrainerInputError(f"--launch {opts.launch!r}: expected one of {', '.join(MODES)}")
    platform = "local" if opts.platform == "local" else detect_platform(env, root)
    if platform == "torchrun":
        if opts.launch != "torchrun":
            raise TrainerInputError(f"--launch {opts.launch}: this process is already a torchrun worker")
        if not opts.program:
            raise TrainerInputError("already under torchrun: give the PROGRAM to run after `--`")
        return LaunchPlan(platform="torchrun", mode="direct", program=list(opts.program))
    if opts.launch == "srun":
        if platform != "slurm":
            raise TrainerInputError(
                f"--launch srun: this is no SLURM task (platform {platform}); srun starts it once per process"
            )
        if not opts.program:
            raise TrainerInputError("no PROGRAM given: use `trainer-launch [OPTIONS] -- PROGRAM [ARGS...]`")
        return srun_plan(env, opts, _slurm_hosts(env))
    plan = _torchrun_plan(platform, env, opts, root, gpus_visible, python, sagemaker_facts)
    return per_node_plan(plan, env, gpus_visible, free_port) if opts.launch == "per_node" else plan

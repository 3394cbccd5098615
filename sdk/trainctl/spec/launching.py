"""Who starts a job's processes, and the rules that go with it (pure: the job in, a problem or advice out).

- `launch: torchrun` (the default): trainctl's launcher runs torchrun on each node, `procs_per_node` workers.
- `launch: per_node`: the job's `command:` is the user's own launcher (`torchrun ...`, `accelerate launch ...`,
  `deepspeed ...`), started once per node with the node's variables (docs/your-program.md).
- `slurm.launch: srun`: srun starts every process as a task of its own, no torchrun (docs/slurm.md); its
  rules are the SLURM section's own (targets/slurm/section.py `problem_with`).

The launcher (trainer_image/trainer/launcher/launch_modes.py) sets the variables each style promises; these rules
refuse the combinations that cannot keep those promises, before anything is rendered or queued.
"""

from __future__ import annotations

import posixpath
import re
from collections.abc import Sequence

from ..errors import FieldProblem
from .target_section import JobShape, TargetSection

PER_NODE_ENV = frozenset(
    {"NNODES", "NODE_RANK", "NPROC_PER_NODE", "TRAINCTL_NODE_ADDRS", "SKYPILOT_NODE_RANK", "SKYPILOT_NUM_NODES",
     "SKYPILOT_NODE_IPS", "SKYPILOT_NUM_GPUS_PER_NODE"}
)  # fmt: skip
"""What the launcher sets for a per_node command besides MASTER_ADDR/PORT (reserved on every job) and torchrun's
PET_* (trainer/launcher/launch_modes.py per_node_env; tests/sdk/test_launch_styles.py checks the two agree)."""

_PYTHON = re.compile(r"python(3(\.\d+)?)?")
_MODULES = {"torch.distributed.run": "python -m torch.distributed.run", "torch.distributed.launch": "python -m "
            "torch.distributed.launch", "accelerate.commands.launch": "python -m accelerate.commands.launch"}  # fmt: skip


def nested_launcher(command: Sequence[str]) -> str | None:
    """The launcher a `command:` starts with (`torchrun`, `python -m torch.distributed.run`, `accelerate launch`,
    `deepspeed`), or None: each starts its own processes, so under trainctl's torchrun it would nest."""
    if not command:
        return None
    head = posixpath.basename(command[0])
    if head in ("torchrun", "deepspeed"):
        return head
    if head == "accelerate" and command[1:2] == ["launch"]:
        return "accelerate launch"
    if _PYTHON.fullmatch(head) and command[1:2] == ["-m"] and len(command) > 2:
        return _MODULES.get(command[2])
    return None


def launch_advice(job: JobShape) -> list[str]:
    """What `validate`, `render` and `submit` warn about on every target: GPUs asked for that no process would
    use, and a launcher command under trainctl's own torchrun. (A target adds its own: `Target.advice`.)"""
    return _idle_gpus(job) + _nested(job)


def _idle_gpus(job: JobShape) -> list[str]:
    """gpus_per_node above the processes torchrun starts (`procs_per_node: 2, gpus_per_node: 3`): the scheduler
    reserves, and the cloud bills, GPUs that sit idle. A per_node command uses what it likes; more processes
    than GPUs is refused (spec/resources.py)."""
    res = job.resources
    if job.launch == "per_node" or res.gpus_per_node <= res.nprocs:
        return []
    idle = res.gpus_per_node - res.nprocs
    return [
        f"resources: gpus_per_node={res.gpus_per_node} but procs_per_node={res.nprocs}: each node reserves "
        f"{res.gpus_per_node} GPUs and {idle} of them sit idle (DDP runs one process per GPU); set procs_per_node: "
        f"{res.gpus_per_node} to use them, or gpus_per_node: {res.nprocs} to stop paying for them"
    ]


def _nested(job: JobShape) -> list[str]:
    """A launcher command (`torchrun ...`) under trainctl's own torchrun: each process would start a launcher."""
    if job.command is None or job.launch == "per_node":
        return []
    found = nested_launcher(job.command)
    if found is None:
        return []
    res = job.resources
    return [
        f"command: starts with {found!r}, under trainctl's own torchrun: {res.nprocs} process(es) per node would each "
        f"start {found}, a launcher inside a launcher. Set `launch: per_node` to start your command once per node "
        "instead, with NNODES, NODE_RANK, MASTER_ADDR, MASTER_PORT and NPROC_PER_NODE (docs/your-program.md)"
    ]


def check_launch(job: JobShape) -> None:
    """Raise the first combination of launch settings that cannot work, naming its field (a FieldProblem);
    then each target section's own rules (`TargetSection.problem_with`: SLURM's `slurm.launch: srun`)."""
    problem = _launch_problem(job)
    for name in job.model_fields_set:
        if problem is None and isinstance(section := getattr(job, name), TargetSection):
            problem = section.problem_with(job)
    if problem is not None:
        raise problem


def _launch_problem(job: JobShape) -> FieldProblem | None:
    res = job.resources
    if job.launch == "per_node":
        if job.trainer is not None:
            return FieldProblem(
                "launch",
                "launch: per_node starts your own launcher (a `command:`) once per node; the built-in trainer is "
                "started by trainctl's own torchrun: remove `launch: per_node`",
            )
        if res.elastic is not None:
            return FieldProblem(
                "resources.elastic",
                "launch: per_node leaves the rendezvous to your launcher: give a fixed resources.nodes, and your "
                "launcher its own elastic options (torchrun --nnodes=MIN:MAX --rdzv-backend=c10d ...)",
            )
        clash = sorted(k for k in job.env if k in PER_NODE_ENV or k.startswith("PET_"))
        if clash:
            return FieldProblem("env", f"{', '.join(clash)}: set by the launcher for launch: per_node; remove from env")
    return None

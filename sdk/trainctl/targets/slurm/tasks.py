"""How srun lays out a job's processes on its nodes (pure, placed in the batch script by render.py).

- `slurm.launch: torchrun` (default): one task per node, the launcher, which starts torchrun with
  `procs_per_node` workers; the task holds every CPU and GPU of its workers.
- `slurm.launch: srun`: one task per process (`--ntasks-per-node = procs_per_node`), as submitit
  (submitit/slurm/slurm.py: `ntasks_per_node`, `gpus_per_task`) and the cluster guides start DDP: each task
  gets `cpus_per_proc` CPUs and one GPU of its own (`--gpus-per-task=1`, or with `gpu_directive: gres` the
  node's `--gres=gpu:N` bound one per task by `--gpu-bind=per_task:1`, the binding srun(1) says
  `--gpus-per-task` implies), and the launcher (`--launch srun`) runs the program in each task directly.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ...spec.job_spec import JobSpec
    from .section import SlurmSection


def per_task(section: SlurmSection) -> bool:
    return section.launch == "srun"


def sbatch_layout(job: JobSpec, section: SlurmSection) -> list[str]:
    """The `#SBATCH` options for tasks, GPUs and CPUs (after --nodes)."""
    res = job.resources
    gres = section.gpu_directive == "gres"
    if not per_task(section):
        opts = ["--ntasks-per-node=1"]
        if res.gpus_per_node:
            opts.append(f"--gres=gpu:{res.gpus_per_node}" if gres else f"--gpus-per-node={res.gpus_per_node}")
        return [*opts, f"--cpus-per-task={res.nprocs * res.cpus_per_proc}"]
    opts = [f"--ntasks-per-node={res.nprocs}"]
    if res.gpus_per_node:  # as many GPUs as tasks (spec/launching.py refuses other counts)
        opts.append(f"--gres=gpu:{res.gpus_per_node}" if gres else "--gpus-per-task=1")
    return [*opts, f"--cpus-per-task={res.cpus_per_proc}"]


def srun_words(job: JobSpec, section: SlurmSection) -> list[str]:
    """The srun that starts the launcher: on every node of the allocation, once per node or once per process."""
    res = job.resources
    if not per_task(section):
        tasks = ['--ntasks="$SLURM_JOB_NUM_NODES"', "--ntasks-per-node=1"]
        cpus = res.nprocs * res.cpus_per_proc
    else:
        tasks = [f'--ntasks="$((SLURM_JOB_NUM_NODES * {res.nprocs}))"', f"--ntasks-per-node={res.nprocs}"]
        cpus = res.cpus_per_proc
    words = ["srun", '--nodes="$SLURM_JOB_NUM_NODES"', *tasks, f"--cpus-per-task={cpus}", "--kill-on-bad-exit=1"]
    if per_task(section) and res.gpus_per_node:
        words.append("--gpu-bind=per_task:1" if section.gpu_directive == "gres" else "--gpus-per-task=1")
    return words


def layout_words(job: JobSpec, section: SlurmSection) -> str:
    """The header's words for who starts the processes."""
    if per_task(section):
        return "srun starts one task per process (slurm.launch: srun), no torchrun."
    if job.launch == "per_node":
        return "one launcher per node, which runs your command (launch: per_node)."
    return "one launcher per node, which starts torchrun."

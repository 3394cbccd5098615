"""What a local run needs on this machine before it starts: its data and secret files, its command's script.

`trainctl validate` and `submit` both ask (preflight.check through the local target's check_inputs), and the
engine asks again when it is called directly: a missing file would only fail later, in the log.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING

from ...submit.bundle import prepare
from ..program import s3_data, script_index
from ..s3_inputs import problems as s3_problems
from .plan import SECRETS_DIR, LocalPlan, plan_of

if TYPE_CHECKING:
    from ...spec.job_spec import JobSpec


def input_problems(job: JobSpec) -> list[str]:
    """What a local run would miss here (its data and secret files, its command's script): it would only fail
    later, in the log. `trainctl validate` and `submit` both ask (preflight.check)."""
    plan = plan_of(prepare(job))
    problems = []
    for name, path in plan.data.items():
        if not path.startswith("s3://") and not any(c in path for c in "$*?[") and not os.path.exists(path):
            problems.append(f"data.{name}: {path} does not exist")
    secrets_dir = Path(".")
    if job.secrets:  # validate makes no state dir for nothing, nor loads the run store for a job without secrets
        from ...runs.store import state_dir

        secrets_dir = state_dir() / "secrets"
    for i, secret in enumerate(job.secrets):
        path = plan.secret_files[secret.env].replace(SECRETS_DIR, str(secrets_dir))
        if not os.path.isfile(path):
            problems.append(
                f"secrets[{i}].name: no secret file {path} (the local target reads each secret from a file)"
            )
    problems += s3_problems(s3_data(job), here_reads_it=True)  # the run reads it with this machine's keys
    return problems + _script_problems(job, plan)


def _script_problems(job: JobSpec, plan: LocalPlan) -> list[str]:
    """A command's script that is not where the local run reads it (beside the job file, or in local.workdir);
    a code bundle's is checked against the bundle (preflight), a container's against its mounts by the runtime."""
    command = job.command or []
    at = script_index(command)
    if at is None or job.code_spec is not None or plan.container:
        return []
    program = plan.argv[plan.argv.index("--") + 1 :]
    where = os.path.join(plan.cwd, program[at])
    if os.path.exists(where):
        return []
    return [f"command[{at}]: {command[at]!r}: no such file {where} (the local run reads it from there)"]


def visible_gpus(environ: dict[str, str] | None = None, driver: Path = Path("/proc/driver/nvidia/gpus")) -> int:
    """The NVIDIA GPUs a process started here would see, without importing torch: one folder per GPU in the
    driver's /proc listing, narrowed by CUDA_VISIBLE_DEVICES where it is set (empty: none)."""
    environ = dict(os.environ) if environ is None else environ
    found = len(list(driver.iterdir())) if driver.is_dir() else 0
    chosen = environ.get("CUDA_VISIBLE_DEVICES")
    if chosen is not None:
        found = min(found, len([d for d in chosen.split(",") if d.strip() and not d.strip().startswith("-")]))
    return found


def gpu_shortfall(job: JobSpec, shown: int | None = None) -> list[str]:
    """A job asking for more GPUs than this machine shows still runs here (the trainer's backend `auto` picks
    gloo on CPU; its launcher says so in the log): said before it starts, not discovered in the log."""
    asked = job.resources.gpus_per_node
    if not asked:
        return []
    shown = visible_gpus() if shown is None else shown
    if shown >= asked:
        return []
    then = "it trains on CPU with gloo" if shown == 0 else f"its {job.resources.nprocs} processes share them"
    if shown == 0 and job.trainer is not None and job.trainer.backend == "nccl":
        then = "its trainer stops at once (trainer.backend: nccl needs a GPU; auto or gloo train on CPU)"
    return [
        f"resources.gpus_per_node={asked}, but this machine shows {shown} GPU(s) (/proc/driver/nvidia/gpus, "
        f"CUDA_VISIBLE_DEVICES): the local run still starts and {then}; set gpus_per_node: {shown} to say so"
    ]

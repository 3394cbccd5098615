"""`python -m trainer.slurm_worker -- PROGRAM [ARGS...]`: what trainctl's torchrun starts as each worker on
SLURM. It makes SLURM's task variables agree with the worker's rank (`launch_modes.worker_task_env`), then
becomes PROGRAM (exec: same pid, so torchrun's signals and exit codes reach the program itself).

Why agree rather than remove: submitit's JobEnvironment reads SLURM_PROCID and SLURM_NTASKS with defaults
(`os.environ.get(..., 0)` / `1`, submitit/core/job_environment.py), so a removed variable would make every
worker rank 0 of 1, silently; Lightning's SLURMEnvironment reads them too, when TORCHELASTIC_RUN_ID is absent.
"""

from __future__ import annotations

import os
import sys

from .launcher.launch_modes import worker_task_env


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if args[:1] == ["--"]:
        args = args[1:]
    if not args:
        print("trainer.slurm_worker: usage: python -m trainer.slurm_worker -- PROGRAM [ARGS...]", file=sys.stderr)
        return 2
    os.environ.update(worker_task_env(os.environ))
    os.execvp(args[0], args)


if __name__ == "__main__":
    sys.exit(main())

"""The SLURM target: one sbatch script per job, submitted with sbatch, watched with scontrol.

render lives in slurm_script.py (pure), the engine side in slurm_engine.py (subprocesses, here
or through ssh to `slurm.login`).
"""

from __future__ import annotations

from .slurm_engine import cancel, logs, status, submit, summary, wait_for
from .slurm_script import render

__all__ = ["cancel", "logs", "render", "status", "submit", "summary", "wait_for"]

"""The SLURM target: one sbatch script per job, submitted with sbatch, watched with scontrol.

render lives in render.py (pure), the engine side in engine.py (subprocesses, here
or through ssh to `slurm.login`).
"""

from __future__ import annotations

from .engine import cancel, logs, status, submit, summary, wait_for
from .render import render

__all__ = ["cancel", "logs", "render", "status", "submit", "summary", "wait_for"]

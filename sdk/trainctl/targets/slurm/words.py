"""The run's folder in the batch script (pure): `${TRAINCTL_RUN_DIR}` is `<workdir>/runs/<job id>`, known only
when the job starts, so the script builds it from `$SLURM_JOB_ID` and every path under it stays a variable."""

from __future__ import annotations

import posixpath
import shlex

RUN_DIR = "${TRAINCTL_RUN_DIR}"
"""Where a path under the run's folder starts, in the plan and the script (the engine fills in the job id)."""


def run_dir_line(workdir: str) -> str:
    """The script's line that names this run's folder (a requeued job keeps its id, so its folder)."""
    return f'export TRAINCTL_RUN_DIR={shlex.quote(posixpath.join(workdir, "runs"))}/"$SLURM_JOB_ID"'


def array_run_dir_line(workdir: str) -> str:
    """An array task's folder line: `<array job id>_<task id>`, the id the run is known by (array.py)."""
    runs = shlex.quote(posixpath.join(workdir, "runs"))
    return f'export TRAINCTL_RUN_DIR={runs}/"${{SLURM_ARRAY_JOB_ID}}_${{SLURM_ARRAY_TASK_ID}}"'


def sh(word: str) -> str:
    """A shell word: quoted as data, except a leading `${TRAINCTL_RUN_DIR}`, which the shell expands."""
    if word.startswith(RUN_DIR):
        rest = word[len(RUN_DIR) :]
        return f'"{RUN_DIR}"' + (shlex.quote(rest) if rest else "")
    return shlex.quote(word)


def concrete(path: str, workdir: str, job_id: str) -> str:
    """A plan path with the job id filled in (what the engine records once sbatch answers)."""
    return path.replace(RUN_DIR, posixpath.join(workdir, "runs", job_id), 1) if path.startswith(RUN_DIR) else path

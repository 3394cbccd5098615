"""The run's folder in the batch script (pure): `${TRAINCTL_RUN_DIR}` is `<workdir>/runs/<job id>-<run uid>`,
known only when the job starts, so the script builds it from `$SLURM_JOB_ID` and `$TRAINCTL_RUN_UID`, and every
path under it stays a variable. The uid (identity.py) is what keeps a reused job id (a cluster whose state was
reset, two clusters over one filesystem, ids that wrap) from landing in another run's folder."""

from __future__ import annotations

import posixpath
import shlex

RUN_DIR = "${TRAINCTL_RUN_DIR}"
"""Where a path under the run's folder starts, in the plan and the script (the engine fills in the job id)."""


def _runs(workdir: str) -> str:
    return shlex.quote(posixpath.join(workdir, "runs"))


def uid_lines(workdir: str, uid: str | None) -> list[str]:
    """The script's lines that set `TRAINCTL_RUN_UID`: the uid submit gave the run, or, in a script submitted
    by hand (no uid), one made at the job's first start and kept beside the run folders for its requeues."""
    if uid is not None:
        return [f"export TRAINCTL_RUN_UID={uid}"]
    runs = _runs(workdir)
    return [
        f'uid_file={runs}/".uid-${{SLURM_CLUSTER_NAME:-}}-$SLURM_JOB_ID"  # submitted by hand (trainctl submit writes '
        "the uid here): made at the first start, kept for requeues",
        '[ "${SLURM_RESTART_COUNT:-0}" != 0 ] && [ -s "$uid_file" ] ||',
        f'  {{ mkdir -p -- {runs} && od -An -N16 -tx1 /dev/urandom | tr -d " \\n" > "$uid_file"; }}',
        'TRAINCTL_RUN_UID=$(cat -- "$uid_file"); export TRAINCTL_RUN_UID',
    ]


def run_dir_line(workdir: str) -> str:
    """The script's line that names this run's folder (a requeued job keeps its id and uid, so its folder)."""
    return f'export TRAINCTL_RUN_DIR={_runs(workdir)}/"$SLURM_JOB_ID-$TRAINCTL_RUN_UID"'


def array_run_dir_line(workdir: str) -> str:
    """An array task's folder line: `<array job id>_<task id>-<uid>`, by the id the run is known by (array.py)."""
    return (
        f'export TRAINCTL_RUN_DIR={_runs(workdir)}/"${{SLURM_ARRAY_JOB_ID}}_${{SLURM_ARRAY_TASK_ID}}-$TRAINCTL_RUN_UID"'
    )


def sh(word: str) -> str:
    """A shell word: quoted as data, except a leading `${TRAINCTL_RUN_DIR}`, which the shell expands."""
    if word.startswith(RUN_DIR):
        rest = word[len(RUN_DIR) :]
        return f'"{RUN_DIR}"' + (shlex.quote(rest) if rest else "")
    return shlex.quote(word)


def concrete(path: str, workdir: str, job_id: str, uid: str) -> str:
    """A plan path with the job id and uid filled in (what the engine records once sbatch answers)."""
    if not path.startswith(RUN_DIR):
        return path
    return path.replace(RUN_DIR, posixpath.join(workdir, "runs", f"{job_id}-{uid}"), 1)

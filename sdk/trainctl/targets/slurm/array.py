"""A sweep's trials as ONE SLURM array job (pure: same trials -> same bytes).

As submitit's `SlurmExecutor.map_array` does (submitit/slurm/slurm.py: `_internal_process_submissions` writes
one file per task into a folder and submits one script with `map_count`; `_make_sbatch_string` turns that
into `--array=0-{n-1}%{min(n, array_parallelism)}` and the log's `%j` into `%A_%a`; each task finds its own
file by its array ids), the array script carries the `#SBATCH` options every trial shares and one line:
run the task file named by `$SLURM_ARRAY_TASK_ID`. A task file is that trial's own sbatch script (render.py,
its `--set` values in the trainer's flags), so each task is a full run: retries, requeue and resume as
for one job. Its folder is `<workdir>/runs/<array job id>_<task id>` (words.py), the id `trainctl` names
the run by, known at submission and kept across a requeue (each task also has a job id of its own, given
only when it starts).
"""

from __future__ import annotations

import posixpath
from collections.abc import Sequence

from ...errors import JobError
from ...spec.job_spec import JobSpec
from ...version import __version__
from .plan import SlurmPlan
from .render import script
from .words import array_run_dir_line, run_dir_line, sh


def _options(text: str) -> list[str]:
    return [line for line in text.splitlines() if line.startswith("#SBATCH ")]


def array_script(jobs: Sequence[JobSpec], parallel: int, tag: str) -> tuple[str, list[str], SlurmPlan, str]:
    """(the array script, each task's script, trial 0's plan, the folder of the task files). A trial whose
    `#SBATCH` options differ from trial 0's (a swept resource) is a JobError: an array has one set."""
    if not jobs:
        raise JobError(["a sweep needs at least one trial"])
    rendered = [script(job, log_tag=tag) for job in jobs]  # one log name: an array has one --output
    first, plan = rendered[0]
    shared = _options(first)
    for index, (text, _) in enumerate(rendered[1:], start=1):
        differ = [line for line in _options(text) if line not in shared]
        if differ:
            raise JobError(
                [
                    f"trial {index}: {differ[0].removeprefix('#SBATCH ')} differs from trial 0 "
                    "(one SLURM array job has one set of #SBATCH options: sweep fields that keep them)"
                ]
            )
    tasks_dir = posixpath.join(plan.workdir, f"{jobs[0].name}.sweep-{tag}")
    n = len(jobs)
    options = [line.replace("%j", "%A_%a") for line in shared]
    options.append(f"#SBATCH --array=0-{n - 1}%{min(n, parallel)}")
    text = "\n".join(
        [
            "#!/bin/bash",
            f"# Rendered by trainctl {__version__}: a sweep of {n} trials of job {jobs[0].name} as one array job,",
            f"# at most {min(n, parallel)} at once; task N runs {tasks_dir}/task-N.sh, trial N's own script.",
            *options,
            "set -euo pipefail",
            f'exec bash {sh(tasks_dir)}/task-"$SLURM_ARRAY_TASK_ID".sh',
        ]
    )
    line = run_dir_line(plan.workdir)
    tasks = []
    for index, (task, _) in enumerate(rendered):
        if line not in task:
            raise AssertionError(f"trial {index}'s script has no run folder line")  # render.py always writes it
        tasks.append(task.replace(line, array_run_dir_line(plan.workdir), 1))
    return text + "\n", tasks, plan, tasks_dir

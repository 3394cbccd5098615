"""The SLURM array of a sweep, as text (targets/slurm/array.py, pure) and scontrol's array task ids."""

from __future__ import annotations

from pathlib import Path

import pytest
from trainctl import Job
from trainctl.errors import JobError
from trainctl.spec.sweep import as_sets, merged, trial_params
from trainctl.targets.slurm.array import array_script
from trainctl.targets.slurm.render import script
from trainctl.targets.slurm.status import array_tasks


def _trials(tmp_path: Path, **space: object) -> list[Job]:
    job = Job.parse(
        {
            "name": "arr",
            "trainer": {"model": "digits"},
            "data": {"train": "/d/train.jsonl"},
            "slurm": {"workdir": str(tmp_path)},
        }
    )
    return [job.with_overrides(as_sets(p)) for p in trial_params(merged(None, **space))]


def test_one_array_script_runs_each_trials_own_script_by_task_id(tmp_path: Path) -> None:
    jobs = _trials(tmp_path, grid={"trainer.lr": [0.002, 0.003, 0.004]})
    text, tasks, _plan, folder = array_script(jobs, parallel=2, tag="t1")
    assert text == array_script(jobs, parallel=2, tag="t1")[0]  # deterministic
    assert "#SBATCH --array=0-2%2" in text and f"#SBATCH --output={tmp_path}/arr-%A_%a-t1.out" in text
    assert folder == f"{tmp_path}/arr.sweep-t1" and f'exec bash {folder}/task-"$SLURM_ARRAY_TASK_ID".sh' in text
    for job, task in zip(jobs, tasks, strict=True):
        own = script(job, log_tag="t1")[0]  # the trial's own script, its run folder named by the array task
        named = task.replace(
            '"${SLURM_ARRAY_JOB_ID}_${SLURM_ARRAY_TASK_ID}-$TRAINCTL_RUN_UID"', '"$SLURM_JOB_ID-$TRAINCTL_RUN_UID"'
        )
        assert named == own
        assert f"--lr {job.trainer.lr}" in task  # type: ignore[union-attr]
    assert array_script(jobs, parallel=8, tag="t1")[0].count("--array=0-2%3") == 1  # never more than the trials


def test_a_trial_that_changes_the_sbatch_options_is_refused(tmp_path: Path) -> None:
    jobs = _trials(tmp_path, grid={"resources.nodes": [1, 2]})
    with pytest.raises(JobError, match=r"trial 1: --nodes=2 differs from trial 0"):
        array_script(jobs, parallel=2, tag="t")


@pytest.mark.parametrize(("spec", "tasks"), [("3", [3]), ("2-5%2", [2, 3, 4, 5]), ("1,3-4", [1, 3, 4]), ("", [])])
def test_scontrol_array_task_ids(spec: str, tasks: list[int]) -> None:
    assert array_tasks(spec) == tasks

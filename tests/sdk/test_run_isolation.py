"""Issue 22 on the local target: each run owns its working folder; automatic resume stays within a run.

A `command:` job in the pattern of pytorch/examples' multinode.py (tests/programs/snapshot_ddp.py: it writes
`snapshot.pt` into its working folder and resumes from it) fails once after its snapshot: the retry of the
same run resumes it, and a second submission of the same job starts from epoch 0 in a folder of its own.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import yaml
from trainctl import Job

pytestmark = pytest.mark.slow
PROGRAM = Path(__file__).resolve().parents[1] / "programs" / "snapshot_ddp.py"
# Each attempt of one run, in order: epoch 1's snapshot, the failure, the retry's resume, the end.
ONE_RUN = [
    "Epoch 1 | Training snapshot saved at {work}/snapshot.pt",
    "[rank0] failing on purpose after epoch 2",
    "attempt 1 ended: application_error",
    "[rank0] Resuming training from snapshot at Epoch 2",
    "[rank0] trained epochs 2..4 in {work}",
]


def snapshot_job(folder: Path, procs: int = 2, **more: object) -> Path:
    """The program beside its job file; `command: [python, snapshot_ddp.py, ...]` as a user writes it."""
    folder.mkdir(parents=True, exist_ok=True)
    shutil.copy(PROGRAM, folder / PROGRAM.name)
    data = {
        "name": "snapshots",
        "command": ["python", PROGRAM.name, "4", "1", "--fail-once-after", "2"],
        "resources": {"procs_per_node": procs},
        "retries": 1,
        **more,
    }
    job_file = folder / "job.yaml"
    job_file.write_text(yaml.safe_dump(data))
    return job_file


def in_order(log: str, lines: list[str]) -> None:
    at = 0
    for line in lines:
        found = log.find(line, at)
        assert found >= 0, f"{line!r} missing (or out of order) in:\n{log[-4000:]}"
        at = found + len(line)


def test_a_snapshot_program_resumes_within_its_run_and_a_new_run_starts_fresh(
    tmp_path: Path, cleanup_runs: list[object]
) -> None:
    job_file = snapshot_job(tmp_path / "project")
    runs = []
    for _ in range(2):
        run = Job.from_yaml(job_file).submit("local")
        cleanup_runs.append(run)
        status = run.wait(timeout=300, poll=0.5)
        log = "\n".join(run.logs())
        assert status.state.value == "succeeded", log[-4000:]
        work = Path(run.paths.work_dir)
        assert work == Path(run.paths.run_dir) / "work"
        in_order(log, [line.format(work=work) for line in ONE_RUN])
        assert log.count("Resuming training from snapshot") == 2, log[-4000:]  # the retry's 2 ranks, no more
        assert torch_epochs(work / "snapshot.pt") == 4 and (work / "failed-once").is_file()
        runs.append(run)
    # the second run trained from epoch 0 in its own folder: the first's final snapshot (epoch 4) was not
    # there, so it saved epoch 1 again and failed once itself; nothing was written beside the job file
    assert runs[0].paths.work_dir != runs[1].paths.work_dir
    assert sorted(p.name for p in (tmp_path / "project").iterdir()) == ["job.yaml", PROGRAM.name]


def torch_epochs(path: Path) -> int:
    import torch

    return int(torch.load(path, weights_only=True)["EPOCHS_RUN"])

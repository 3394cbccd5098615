"""The progress protocol (docs/contracts.md "Progress"): the trainer's line and file read back by trainctl,
the one-line summary `trainctl status` prints, and a `command:` program that reports through its log."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import pytest
from trainctl import Job
from trainctl.runs.progress import describe, from_json, from_line, from_metrics, last_in, short
from trainctl.runs.state import Progress
from trainer.training.progress import progress_line


def test_the_issues_example_reads_as_the_issue_writes_it() -> None:
    found = Progress(step=1200, total_steps=5000, loss=0.41, samples_per_s=1850.4, eta_s=840)
    assert describe(found) == "step 1,200/5,000 (24 %) · loss 0.41 · 1,850 samples/s · ETA 14 min"
    assert short(found) == "1,200/5,000 (24 %)" and short(None) == "-"
    assert describe(Progress(step=7)) == "step 7"
    assert describe(Progress(step=10, total_steps=10, eta_s=0.0)) == "step 10/10 (100 %)"  # no ETA once done
    assert describe(Progress(step=1, total_steps=9, eta_s=3 * 3600 + 60 * 7)).endswith("ETA 3 h 07 min")
    assert describe(found, finished=True) == "step 1,200/5,000 (24 %) · loss 0.41 · 1,850 samples/s"  # cancelled


def test_the_trainers_line_and_file_are_what_trainctl_reads() -> None:
    fields = {"step": 12, "total_steps": 40, "epoch": 1, "loss": 0.123456789, "samples_per_s": 850.04, "eta_s": 3.14}
    line = f"2026-11-24T04:00:00 [rank0] {progress_line(fields)}"  # whatever comes before the mark
    parsed = from_line(line)
    assert parsed is not None and (parsed.step, parsed.total_steps, parsed.epoch) == (12, 40, 1)
    assert parsed.loss == pytest.approx(0.123457) and parsed.samples_per_s == 850.0 and parsed.eta_s == 3.1
    assert from_json(json.dumps({**fields, "updated_at": 5.0})) == Progress(**fields, updated_at=5.0)


def test_partial_and_broken_reports() -> None:
    assert from_line("trainctl progress: step=5") == Progress(step=5)
    assert from_line("trainctl progress: step=5/9 loss=nan eta_s=inf junk") == Progress(step=5, total_steps=9)
    assert from_line("trainctl progress: loss=0.3") is None  # no step, no progress
    assert from_line("[rank0] step 10/40 loss 0.3") is None and from_json("{half") is None and from_json("[]") is None
    assert last_in(["trainctl progress: step=1/4", "other", "trainctl progress: step=2/4", "x"]) == Progress(
        step=2, total_steps=4
    )
    assert from_metrics({"train:step": 30.0, "train:total_steps": 40.0, "train:loss": 0.2}, 9.0) == Progress(
        step=30, total_steps=40, loss=0.2, updated_at=9.0
    )


@pytest.mark.slow
def test_a_command_job_reports_through_its_log(helpers: SimpleNamespace, cleanup_runs: list[object]) -> None:
    code = (
        "import time\n"
        "for step in range(1, 4):\n"
        "    print(f'trainctl progress: step={step}/300 loss={1 / step:.3f}', flush=True)\n"
        "    time.sleep(0.5)\n"
        "time.sleep(600)\n"
    )
    run = Job.parse({"name": "cmd-progress", "command": [sys.executable, "-c", code]}).submit("local")
    cleanup_runs.append(run)
    helpers.wait_for(lambda: (run.status().progress or Progress()).step == 3, 60, "the third progress line")
    found = run.status().progress
    assert found == Progress(step=3, total_steps=300, loss=0.333), found
    assert not (Path(run.paths.output_dir or "") / "progress.json").exists()  # read from the log, not a file
    started = time.monotonic()
    run.cancel()
    assert time.monotonic() - started < 60


def test_the_file_catches_up_with_the_last_step_when_training_stops(tmp_path: Path) -> None:
    """Written at most once a second while steps run; a stop (SIGTERM's checkpoint, a crash) leaves it at the
    last step trained, not the one of up to a second before (issue 37: status said 166 where the checkpoint
    and its resume were at 260)."""
    import torch
    from trainer.training.progress import FILE_NAME, ProgressReporter
    from trainer.training.steps import StepDone, StepTiming

    reporter = ProgressReporter(tmp_path, rank=0, total=100, global_batch=8, every=50)
    timing = StepTiming(wall_s=0.001, data_wait_s=0.0, sync_wait_s=0.0, compute_s=0.001)
    for step in range(1, 8):
        reporter.on_step(StepDone(step, 0, torch.tensor(1.0 / step), timing), 0.5)
    assert json.loads((tmp_path / FILE_NAME).read_text())["step"] == 1  # the second's first step only
    reporter.close()
    assert json.loads((tmp_path / FILE_NAME).read_text())["step"] == 7
    (tmp_path / FILE_NAME).unlink()
    reporter.close()  # nothing newer: nothing written
    assert not (tmp_path / FILE_NAME).exists()


def test_the_trainers_deterministic_mode_reaches_trainctl_status() -> None:
    """The trainer reports whether its deterministic algorithms are on (`auto` resolved, issue 40) in its line and
    its file; trainctl reads it back from both and says it."""
    from trainctl.runs.progress import mode_line

    fields = {"step": 3, "total_steps": 9, "deterministic": False}
    line = progress_line(fields)
    assert line.endswith(" deterministic=false"), line
    assert from_line(f"[rank0] {line}") == Progress(step=3, total_steps=9, deterministic=False)
    assert from_json(json.dumps({**fields, "deterministic": True})) == Progress(
        step=3, total_steps=9, deterministic=True
    )
    assert mode_line(Progress(step=3, deterministic=True)).startswith("on: a resume is bit-identical")
    assert mode_line(Progress(step=3, deterministic=False)).startswith("off: faster kernels")
    assert mode_line(Progress(step=3)) == "" and from_line("trainctl progress: step=1 deterministic=x") == Progress(
        step=1
    )

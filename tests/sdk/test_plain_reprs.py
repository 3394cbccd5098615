"""Plain reprs for notebooks and REPLs (issue 27, finding 4): a job as YAML, a render as its text, a status in
words and local time, logs as an object that says what it is, and `wait(check=True)` raising on failure."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from trainctl import Job, RunFailed

ROOT = Path(__file__).resolve().parents[2]


def test_job_and_render_reprs_are_their_text() -> None:
    job = Job.from_yaml(ROOT / "examples" / "digits.yaml")
    text = repr(job)
    assert text.startswith("Job:\n  name: digits\n") and "  resources:\n    procs_per_node: 2\n" in text
    assert "TrainerConfig(" not in text and "\\n" not in text
    rendered = job.render("local")
    shown = repr(rendered)
    assert shown.startswith("# local: digits.sh\n") and rendered.text in shown and "\\n" not in shown


def test_status_logs_and_wait_check_of_a_failed_run(tmp_path: Path) -> None:
    job = Job(name="boom", command=["python", "-c", "print('about to fail'); raise SystemExit(3)"])
    run = job.submit("local")
    with pytest.raises(RunFailed) as caught:
        run.wait(timeout=120, poll=0.3, check=True)
    message = str(caught.value)
    assert run.id in message and "failed" in message and "log.txt" in message
    assert "rank 0 on " in message and "failed (exit 3)" in message and "  about to fail" in message  # issue 37
    assert caught.value.status.exit_code == 3
    status = run.status()
    shown = repr(status)
    assert shown.startswith("RunStatus(failed") and "RunState." not in shown and str(status) == shown
    assert re.search(r"finished \d{4}-\d\d-\d\d \d\d:\d\d:\d\d \(\d+s ago\), took \d+\.\ds", shown), shown
    logs = run.logs()
    assert "generator" not in repr(logs) and run.id in repr(logs)
    assert "about to fail" in str(logs) and any("about to fail" in line for line in logs)
    assert run.wait(timeout=5, poll=0.3).state.value == "failed"  # without check: the status, as before

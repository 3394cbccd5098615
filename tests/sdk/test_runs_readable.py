"""Run ids as `gh` and `docker` take them, and status in words (issue 27, findings 7 and 8): a unique prefix, the
bare local id, no id for the newest run (said in the help); readable local times and a duration."""

from __future__ import annotations

import re
import time
from pathlib import Path

import yaml
from run_cli import cli_says  # tests/support
from trainctl import Run
from trainctl.runs.store import RunStore


def test_prefixes_bare_local_ids_and_the_newest_run() -> None:
    store = RunStore()
    now = time.time()
    store.record(Run(target="local", native_id="20261124-101010-aa-1a2b", job_name="aa", created_at=now - 30))
    store.record(Run(target="local", native_id="20261124-101011-bb-3c4d", job_name="bb", created_at=now - 20))
    store.record(Run(target="slurm", native_id="42", job_name="big", created_at=now - 10))
    assert store.resolve("20261124-101010") == "local:20261124-101010-aa-1a2b"  # bare local id prefix
    assert store.resolve("local:20261124-101011") == "local:20261124-101011-bb-3c4d"
    assert store.resolve("42") == "slurm:42"
    assert store.resolve(None) == "slurm:42"  # the newest
    assert store.resolve("slurm:4") == "slurm:4"  # a whole id of another target is that job, never a prefix
    assert Run.from_id("20261124-101010-aa").job_name == "aa"
    code, _, err = cli_says("status", "20261124-1010")
    assert code == 2 and "ambiguous" in err and "local:20261124-101010-aa-1a2b" in err
    code, _, err = cli_says("logs", "nothing-like-it")
    assert code == 2 and "no recorded run" in err


def test_no_runs_means_no_newest_run() -> None:
    code, _, err = cli_says("status")
    assert code == 2 and "no runs yet" in err


def test_status_and_logs_help_say_no_id_means_the_newest_run() -> None:
    for command in ("status", "logs"):
        code, out, _ = cli_says(command, "--help")
        text = " ".join(out.split())
        assert code == 0 and "[RUN]" in text and "default: the newest run" in text and "unique prefix" in text


def test_status_of_the_newest_run_shows_local_times_and_a_duration(tmp_path: Path) -> None:
    job = tmp_path / "job.yaml"
    job.write_text(yaml.safe_dump({"name": "quick", "command": ["python", "-c", "import time; time.sleep(1.2)"]}))
    code, _, err = cli_says("submit", str(job), "--wait")
    assert code == 0, err
    code, out, _ = cli_says("status")
    assert code == 0 and "succeeded" in out, out
    stamp = r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d \(\d+[smhd] ago\)"
    assert re.search(rf"submitted: {stamp}", out) and re.search(rf"finished_at: {stamp}", out), out
    assert not re.search(r"_at: \d{9,}\.\d", out), "no epoch floats"
    took = re.search(r"duration: (\d+\.\d)s", out)
    assert took and 1.2 <= float(took.group(1)) < 60, out


def test_ctrl_c_while_following_is_not_an_error(tmp_path: Path) -> None:
    """Issue 27 finding 13: Ctrl-C during `submit --wait` stops following; it says so without `error:`."""
    import os
    import signal
    import subprocess
    import sys

    job = tmp_path / "job.yaml"
    job.write_text(yaml.safe_dump({"name": "slow", "command": ["python", "-c", "import time; time.sleep(120)"]}))
    proc = subprocess.Popen(
        [sys.executable, "-m", "trainctl", "submit", str(job), "--wait"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=dict(os.environ),
        # as from a terminal: a suite started in the background of a shell without job control (`cmd &`) runs
        # with SIGINT ignored, which every child inherits, and Python then installs no KeyboardInterrupt
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )  # fmt: skip
    assert proc.stderr is not None
    first = proc.stderr.readline()  # "submitted local:..." once the run exists
    assert first.startswith("submitted local:"), first
    assert proc.stdout is not None and proc.stdout.readline(), "no log line followed"  # following, not submitting
    time.sleep(0.5)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    run_id = first.split()[1]
    try:
        assert proc.returncode == 130, err
        assert "error:" not in err and f"stopped following {run_id}; the run goes on" in err, err
    finally:
        cli_says("cancel", run_id)

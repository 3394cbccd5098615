"""Issue 22: `status` and `cancel` look at a local run's processes themselves, not only at its runner.

The runner is SIGKILLed mid-run (as `kill -9`, the OOM killer or a suspend would): `status` says the job lives
on, with its pids; `cancel` stops every process of it and exits 0 only when nothing is left (checked here
with psutil: no process carries the run's TRAINCTL_RUN_DIR). A process cancel cannot stop (one of another
user, and cancel without CAP_KILL) makes it exit 1 naming it.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import psutil
import pytest
from trainctl import Job, RunState
from trainctl.targets.local.engine import CANCEL_GRACE_S

pytestmark = pytest.mark.slow
TRAINCTL = str(Path(sys.executable).parent / "trainctl")


def test_a_run_whose_runner_was_killed_is_reported_live_and_cancelled_whole(
    digits_job_file: Path, helpers: SimpleNamespace, cleanup_runs: list[object]
) -> None:
    run = Job.from_yaml(digits_job_file).with_overrides(["trainer.epochs=200"]).submit("local")
    cleanup_runs.append(run)
    log = Path(run.paths.log)
    helpers.wait_for(lambda: log.is_file() and "step 10/" in log.read_text(), 120, "the run to train")
    job_pid = psutil.Process(run.handle.pid).children()[0].pid  # the launcher the runner started
    before = {p.pid for p in helpers.of_run(run.paths.run_dir)}
    assert job_pid in before and len(before) >= 3, before  # the launcher and 2 workers (and torchrun's helpers)

    os.kill(run.handle.pid, signal.SIGKILL)  # the runner only
    helpers.wait_for(lambda: not psutil.pid_exists(run.handle.pid) or _zombie(run.handle.pid), 10, "the runner")
    st = run.status()
    assert st.state is RunState.RUNNING and st.native_state == "runner lost", st
    assert f"the runner (pid {run.handle.pid}) is gone, but the job's processes still run" in st.reason
    assert f"pid {job_pid} (" in st.reason and set(st.details["pids"]) >= before - {run.handle.pid}, st
    shown = subprocess.run([TRAINCTL, "status", run.id], capture_output=True, text=True, timeout=60)
    assert "running (runner lost)" in shown.stdout and str(job_pid) in shown.stdout, shown.stdout

    # the launcher too: its workers live on, re-parented away from it, still found by their environment.
    # They are stopped first: the launcher reads their output through FIFOs (trainer/worker_output.py), so a
    # worker that prints after its launcher died gets SIGPIPE; one that is quiet (stuck in a collective, as
    # a stopped one is) outlives it, which is the orphan cancel has to find.
    workers = [p for p in psutil.Process(job_pid).children() if "trainer.train" in " ".join(p.cmdline())]
    assert len(workers) == 2, workers
    for worker in workers:
        worker.send_signal(signal.SIGSTOP)
    os.kill(job_pid, signal.SIGKILL)
    time.sleep(1)
    orphans = helpers.of_run(run.paths.run_dir)
    assert {p.pid for p in orphans} == {w.pid for w in workers}, orphans  # torchrun's workers outlive their agent
    assert all(p.ppid() != job_pid for p in orphans)
    assert set(run.status().details["pids"]) == {p.pid for p in orphans}

    started = time.monotonic()
    done = subprocess.run([TRAINCTL, "cancel", run.id], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and f"{run.id}: cancelled" in done.stdout, done.stdout + done.stderr
    assert helpers.of_run(run.paths.run_dir) == [], "a process of the run survived cancel"
    assert not any(psutil.pid_exists(p) and not _zombie(p) for p in before)
    assert run.status().state is RunState.CANCELLED
    print(f"runner killed: {len(before)} processes found, all stopped in {time.monotonic() - started:.1f}s")


def test_cancel_exits_1_naming_a_process_it_could_not_stop(tmp_path: Path, helpers: SimpleNamespace) -> None:
    """A process of the run that belongs to another user (uid 65534) and ignores SIGTERM, and a cancel without
    CAP_KILL (root keeps its other powers: it still reads that process's environment): it survives the
    SIGKILL, and cancel says so, without waiting the grace for a process it may not signal."""
    # its own session (no process-group signal of the launcher reaches it), SIGTERM ignored, uid 65534
    other_user = "setsid setpriv --reuid=65534 --regid=65534 --clear-groups sh -c 'trap \"\" TERM; exec sleep 600'"
    script = f"{other_user} & sleep 600"
    run = Job.parse({"name": "stubborn", "command": ["bash", "-c", script]}).submit("local")
    try:

        def theirs() -> list[
            psutil.Process
        ]:  # setpriv switches user only when it runs: under load, after the others start
            return [p for p in helpers.of_run(run.paths.run_dir) if p.uids().real == 65534]

        helpers.wait_for(lambda: len(helpers.of_run(run.paths.run_dir)) >= 3 and theirs(), 30, "the job's processes")
        other = theirs()[0]
        os.kill(run.handle.pid, signal.SIGKILL)  # no runner left to kill it with its own CAP_KILL
        weak = ["setpriv", "--bounding-set", "-kill", TRAINCTL, "cancel", run.id]
        began = time.monotonic()
        done = subprocess.run(weak, capture_output=True, text=True, timeout=120, env={**os.environ, "COLUMNS": "400"})
        took = time.monotonic() - began
        assert done.returncode == 1, done.stdout + done.stderr
        assert took < CANCEL_GRACE_S, f"{took:.1f} s: cancel sat out the grace for a process it may not signal"
        said = " ".join(done.stderr.split())
        assert "cancel could not stop every process of the run" in said and f"pid {other.pid} (sleep 600)" in said
        assert [p.pid for p in helpers.of_run(run.paths.run_dir)] == [other.pid]  # the rest was stopped
        assert run.status().state is RunState.RUNNING  # and status still shows it
    finally:
        for proc in helpers.of_run(run.paths.run_dir):
            proc.kill()
    done = subprocess.run([TRAINCTL, "cancel", run.id], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert run.status().state is RunState.CANCELLED


@pytest.mark.parametrize("job_ends", ["finishing", "killed"])
def test_a_run_that_ends_after_its_runner_says_whether_the_trainer_finished(
    digits_job_file: Path, helpers: SimpleNamespace, cleanup_runs: list[object], job_ends: str
) -> None:
    """The runner is gone and then so is the job: no exit code was recorded. A job that went on to its last step
    (the trainer wrote summary.json) reads as succeeded, saying the exit code is unknown (before: `failed`,
    `the runner process ended without recording an exit status`, for a run that had trained to the end); one
    killed short of it reads as failed, saying it did not finish. Either way its attempt has ended, and a later
    `cancel` leaves it as it was (before: it recorded `cancelled` over a run that had succeeded)."""
    run = Job.from_yaml(digits_job_file).with_overrides(["trainer.epochs=3"]).submit("local")
    cleanup_runs.append(run)
    log = Path(run.paths.log)
    helpers.wait_for(lambda: log.is_file() and "step 10/" in log.read_text(), 120, "the run to train")
    os.kill(run.handle.pid, signal.SIGKILL)
    if job_ends == "killed":
        for proc in helpers.of_run(run.paths.run_dir):
            proc.kill()
    helpers.wait_for(lambda: run.status().state.finished, 120, "the job to end")
    assert not helpers.of_run(run.paths.run_dir)
    st = run.status()
    assert st.attempts and all(a.ended_at is not None and a.state is st.state for a in st.attempts), st.attempts
    if job_ends == "finishing":
        assert st.state is RunState.SUCCEEDED and st.native_state == "finished, runner lost", st
        assert "no exit code was recorded; the trainer finished" in st.reason and "summary.json" in st.reason
    else:
        assert st.state is RunState.FAILED and st.native_state == "lost", st
        assert "the trainer wrote no summary.json: it did not finish" in st.reason, st.reason
    run.cancel()
    after = run.status()
    assert (after.state, after.native_state, after.reason) == (st.state, st.native_state, st.reason)
    assert not (Path(run.paths.run_dir) / "exit.json").exists()  # nothing recorded over what the trainer left


def _zombie(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True

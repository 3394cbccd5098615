"""End to end on this machine: the digits demo through the real launcher, torchrun and trainer (2 gloo processes).

One run goes queued -> running -> succeeded with its log streaming and accuracy above 0.9; a second is
cancelled through the CLI and leaves no process behind, its step rising in `trainctl status` (text and
json) while it trains; `list` shows both, with their progress; `submit --wait` ends with the
accuracy and where the checkpoints are. Short command jobs cover failure, retries and max_runtime.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import threading
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from trainctl import Job, JobError, Run, RunState
from trainctl.runs.store import RunStore
from trainctl.targets.sagemaker.request import metric_definitions

pytestmark = pytest.mark.slow


def trainctl(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    script = Path(sys.executable).parent / "trainctl"
    return subprocess.run([str(script), *args], capture_output=True, text=True, timeout=timeout)


def test_digits_demo_then_a_cancelled_run(
    digits_job_file: Path, helpers: SimpleNamespace, cleanup_runs: list[object]
) -> None:
    # ---- run 1: the README's demo command, unchanged job, watched from outside while it runs
    demo = subprocess.Popen(
        [str(Path(sys.executable).parent / "trainctl"), "submit", str(digits_job_file), "--target", "local", "--wait"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    lines: list[tuple[float, str]] = []
    reader = threading.Thread(target=lambda: lines.extend((time.time(), line) for line in demo.stdout))  # type: ignore[union-attr]
    reader.start()
    helpers.wait_for(lambda: bool(RunStore().list()), 60, "the demo run to be recorded")
    record = RunStore().list()[0]
    cleanup_runs.append(record.run)
    states = [record.state]
    while demo.poll() is None:
        states.append(Run.from_id(record.id).status().state)
        time.sleep(0.25)
    reader.join()
    stderr = demo.stderr.read()  # type: ignore[union-attr]
    out = "".join(text for _, text in lines)
    assert demo.returncode == 0, out[-3000:] + stderr[-3000:]
    run = Run.from_id(record.id)
    states.append(run.status().state)

    # states only move forward: queued, running, succeeded
    order = [RunState.QUEUED, RunState.RUNNING, RunState.SUCCEEDED]
    assert states[0] is RunState.QUEUED and RunState.RUNNING in states and states[-1] is RunState.SUCCEEDED, states
    assert [order.index(s) for s in states] == sorted(order.index(s) for s in states), states
    # the log streamed while the job trained, not all at the end (the trainer writes summary.json when training
    # is over; its processes leave within a second of it)
    trained_at = (Path(run.paths.output_dir) / "summary.json").stat().st_mtime
    step_lines = [t for t, text in lines if "[rank0] step" in text]
    assert step_lines and step_lines[0] < trained_at, "no log line arrived while the job trained"
    assert f"submitted {run.id}" in stderr
    # it ends with the accuracy (from the trainer's summary.json) and where the checkpoints are
    summary = json.loads((Path(run.paths.output_dir) / "summary.json").read_text())
    assert summary["world_size"] == 2 and summary["val_accuracy"] > 0.9, summary
    assert f"accuracy: {summary['val_accuracy']:.4f}" in out
    checkpoints = sorted(Path(run.paths.checkpoint_dir).glob("step-*"))
    assert checkpoints and Path(summary["checkpoint"]) == checkpoints[-1]
    assert f"checkpoints in: {run.paths.checkpoint_dir}" in out
    log_lines = list(run.logs())
    assert [text.rstrip("\n") for _, text in lines][: len(log_lines)] == log_lines  # --wait streamed all of it
    # SageMaker's MetricDefinitions (the regexes its request carries) read the same figures from these real lines
    final = json.loads((Path(run.paths.output_dir) / "progress.json").read_text())
    metrics = {}
    for metric in metric_definitions():
        values = [found[1] for line in log_lines if (found := re.search(metric["Regex"], line))]
        assert values, metric
        metrics[metric["Name"]] = float(values[-1])
    assert metrics["train:step"] == metrics["train:total_steps"] == final["step"] == summary["steps"], metrics
    assert metrics["train:epoch"] == final["epoch"] and metrics["train:eta_s"] == final["eta_s"] == 0, metrics
    assert metrics["train:loss"] == pytest.approx(final["loss"], rel=1e-5), (metrics, final)
    assert metrics["train:samples_per_s"] == pytest.approx(final["samples_per_s"], abs=0.05), (metrics, final)
    assert metrics["validation:loss"] == summary["val_loss"], metrics
    assert metrics["validation:accuracy"] == summary["val_accuracy"], metrics

    # ---- run 2, from Python: a long run, cancelled through the CLI once its workers are training
    second = Job.from_yaml(digits_job_file).with_overrides(["trainer.epochs=200"]).submit(target="local")
    cleanup_runs.append(second)
    assert second.id.startswith("local:") and second.id in repr(second) and "digits" in repr(second)
    run_dir = second.paths.run_dir
    log = Path(second.paths.log)
    helpers.wait_for(lambda: log.is_file() and "step 10/" in log.read_text(), 90, "the second run to train")
    assert second.status().state is RunState.RUNNING
    # its progress, read by `trainctl status` from the run folder while it trains: the step rises
    seen: list[dict[str, Any]] = []

    def step_rose() -> bool:
        seen.append(json.loads(trainctl("status", second.id, "--output", "json").stdout).get("progress") or {})
        return len({p["step"] for p in seen if "step" in p}) >= 3

    helpers.wait_for(step_rose, 90, "the step in trainctl status to rise")
    steps = [p["step"] for p in seen if "step" in p]
    assert steps == sorted(steps) and steps[0] >= 1, seen  # progress.json: at most once a second
    now = seen[-1]
    assert now["total_steps"] == 200 * summary["steps"] // 8 and now["epoch"] >= 0 and now["loss"] > 0, now
    assert now["samples_per_s"] > 0 and now["eta_s"] > 0 and time.time() - now["updated_at"] < 30, now
    shown = trainctl("status", second.id).stdout
    line = re.search(
        r"progress: step ([\d,]+)/([\d,]+) \((\d+) %\) · epoch \d+ · loss \S+ · [\d,]+ samples/s · ETA \d+", shown
    )
    assert line and int(line[1].replace(",", "")) >= steps[-1], shown
    pgid = second.handle.pid
    workers = [p for p, cmd in helpers.processes_mentioning(run_dir) if "trainer.train" in cmd]
    assert len(workers) >= 3  # launcher/torchrun + 2 workers (workers live in their own sessions)
    assert helpers.group_alive(pgid)

    cancelled = trainctl("cancel", second.id)
    assert cancelled.returncode == 0 and "cancelled" in cancelled.stdout, cancelled.stderr
    assert second.status().state is RunState.CANCELLED
    helpers.wait_for(lambda: not helpers.group_alive(pgid), 5, "the run's process group to be gone")
    assert helpers.processes_mentioning(run_dir) == []

    # ---- list shows both, with their last known states
    listed = json.loads(trainctl("list", "--output", "json").stdout)
    assert {r["id"]: r["state"] for r in listed} == {second.id: "cancelled", run.id: "succeeded"}
    text = trainctl("list").stdout
    assert run.id in text and second.id in text
    # the list's progress column: the finished run at 100 %, the cancelled one where status last saw it
    rows = {line.split()[0]: line for line in text.splitlines()[1:]}
    assert f"{summary['steps']}/{summary['steps']} (100 %)" in rows[run.id], text
    assert re.search(r"cancelled +[\d,]+/[\d,]+ \(\d+ %\)", rows[second.id]), text
    assert {r["id"]: (r.get("progress") or {}).get("step") for r in listed}[run.id] == summary["steps"]


def command_job(tmp_path: Path, code: str, **fields: object) -> Job:
    data = {"name": "cmd", "command": [sys.executable, "-c", code], **fields}
    job = Job.parse(data)
    return job


def test_failure_with_retries_and_max_runtime(
    tmp_path: Path, helpers: SimpleNamespace, cleanup_runs: list[object]
) -> None:
    counter = tmp_path / "attempts"
    code = f"import pathlib, sys; pathlib.Path({str(counter)!r}).open('a').write('x'); sys.exit(3)"
    failing = command_job(tmp_path, code, retries=1).submit("local")
    bad_input = command_job(tmp_path, "import sys; sys.exit(2)", retries=2).submit("local")
    not_listed = command_job(tmp_path, "import sys; sys.exit(3)", retries=2, retry_on=["hang"]).submit("local")
    slow = command_job(tmp_path, "import time; print('sleeping', flush=True); time.sleep(600)", max_runtime=3)
    hung = slow.submit("local")
    cleanup_runs += [failing, bad_input, not_listed, hung]

    status = failing.wait(timeout=120, poll=0.2)
    log = "\n".join(failing.logs())
    assert status.state is RunState.FAILED and status.exit_code not in (0, None), log
    assert counter.read_text() == "xx", log  # the first attempt and one retry
    assert "attempt 1 ended: application_error (exit 3); retry 1 of 1" in log  # causes.end_line
    # each attempt in status: its own pid, cause and exit code, one after the other
    shown = json.loads(trainctl("status", failing.id, "--output", "json").stdout)["attempts"]
    assert [(a["number"], a["cause"], a["exit_code"]) for a in shown] == [(n, "application_error", 3) for n in (1, 2)]
    assert shown[0]["engine_id"] != shown[1]["engine_id"] and shown[0]["ended_at"] <= shown[1]["started_at"]
    text = trainctl("status", failing.id).stdout
    assert "attempt 1 [pid " in text and "attempt 2 [pid " in text and "application_error, exit 3" in text, text

    for run, cause in ((bad_input, "invalid"), (not_listed, "application_error")):  # exit 2 never; not in retry_on
        status = run.wait(timeout=120, poll=0.2)
        assert [(a.number, a.cause.value if a.cause else None) for a in status.attempts] == [(1, cause)]

    status = hung.wait(timeout=120, poll=0.2)
    assert status.state is RunState.FAILED and "max_runtime" in status.reason, "\n".join(hung.logs())
    run_dir = hung.paths.run_dir
    helpers.wait_for(lambda: helpers.processes_mentioning(run_dir) == [], 10, "the timed-out run's processes to go")


def test_cancel_right_after_submit(tmp_path: Path, helpers: SimpleNamespace) -> None:
    run = command_job(tmp_path, "import time; time.sleep(600)").submit("local")
    run.cancel()
    assert run.status().state is RunState.CANCELLED
    helpers.wait_for(lambda: helpers.processes_mentioning(run.paths.run_dir) == [], 10, "the run's processes to go")
    run.cancel()  # cancelling a finished run is a no-op
    assert run.status().state is RunState.CANCELLED


def test_missing_data_is_refused_before_anything_starts(tmp_path: Path, trainctl_home: Path) -> None:
    job_file = tmp_path / "j.yaml"
    job_file.write_text("name: nodata\ntrainer: {model: digits}\ndata: {train: missing/train.jsonl}\n")
    with pytest.raises(JobError, match=r"data\.train: .*does not exist"):
        Job.from_yaml(job_file).submit("local")
    assert not (trainctl_home / "runs").exists() or not any((trainctl_home / "runs").iterdir())
    result = trainctl("submit", str(job_file))
    assert result.returncode == 2 and "data.train" in result.stderr and "Traceback" not in result.stderr


def test_following_a_run_this_process_started_trusts_its_unreaped_runner(
    monkeypatch: pytest.MonkeyPatch, trainctl_home: Path
) -> None:
    """`submit --wait` follows the log until the run ends. A runner this process started is alive until it is
    reaped, whatever a look at its command line says while it starts (here every such look fails): the follow
    still reads the log to its last line."""
    import trainctl.targets.detached as detached

    monkeypatch.setattr(detached, "alive", lambda pid, must_contain=None: False)
    program = "import time; time.sleep(1.5); print('written after the start', flush=True)"
    run = Job.parse({"name": "follow", "command": [sys.executable, "-c", program]}).submit("local")
    assert "[rank0] written after the start" in list(run.logs(follow=True))
    assert run.wait(timeout=60, poll=0.2).state is RunState.SUCCEEDED

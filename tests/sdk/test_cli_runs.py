"""Commands on recorded runs (issue 37, section 5): what they take when no RUN is given, what they say for a run
no one recorded here, and their JSON output. In-process through typer's runner; no engine is asked."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

import pytest
from run_cli import cli_says  # tests/support


def test_metrics_without_a_run_is_the_newest_run(monkeypatch: pytest.MonkeyPatch) -> None:
    """As status and logs: `trainctl metrics` alone failed ('Missing argument')."""
    from trainctl import Run
    from trainctl.runs.store import RunStore

    store = RunStore()
    store.record(Run(target="local", native_id="old-1", created_at=time.time() - 60), state="succeeded")
    store.record(Run(target="local", native_id="new-2"), state="succeeded")

    def rows(self: Run, lineage: bool = True) -> list[dict[str, Any]]:
        return [{"run": self.id, "step": 10, "loss": 0.5}]

    monkeypatch.setattr(Run, "metrics", rows)
    code, out, err = cli_says("metrics", "--output", "json")
    assert code == 0 and [r["run"] for r in json.loads(out)] == ["local:new-2"], err
    code, out, _ = cli_says("metrics", "local:old-1", "local:new-2", "--output", "json")
    assert code == 0 and [r["run"] for r in json.loads(out)] == ["local:old-1", "local:new-2"]


def test_metrics_without_any_run_says_there_is_none() -> None:
    code, out, err = cli_says("metrics")
    assert code == 2 and out == "" and "no runs yet" in err


def fake_slurm(folder: Path, monkeypatch: pytest.MonkeyPatch, known: str = "") -> None:
    """`scontrol` and `sacct` on PATH as slurmctld without accounting answers: `known` (a `scontrol show job -o`
    line) or, for any other id, scontrol's own 'Invalid job id specified'."""
    folder.mkdir()
    for name, body in {
        "scontrol": f'if [ -n "{known}" ]; then echo "{known}"; exit 0; fi\n'
        'echo "slurm_load_jobs error: Invalid job id specified" >&2; exit 1',
        "sacct": 'echo "sacct: error: Slurm accounting storage is disabled" >&2; exit 1',
    }.items():
        (folder / name).write_text(f"#!/bin/sh\n{body}\n")
        (folder / name).chmod(0o755)
    monkeypatch.setenv("PATH", f"{folder}{os.pathsep}{os.environ['PATH']}")


@pytest.mark.parametrize("output", ["text", "json"])
def test_status_of_a_slurm_job_never_submitted_from_here_is_no_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, output: str
) -> None:
    """It exited 0 with state `unknown` and an invented 'submitted ... (0s ago)'; `status local:nope` exits 2."""
    fake_slurm(tmp_path / "bin", monkeypatch)
    code, out, err = cli_says("status", "slurm:42", "--output", output)
    assert code == 2, out + err
    said = json.loads(out)["error"]["message"] if output == "json" else err
    assert "slurm:42: no such run: it was not submitted from here" in said and "SLURM no longer knows job 42" in said
    assert "trainctl list --target slurm" in said and "submitted:" not in out


def test_status_of_a_recorded_slurm_run_slurm_forgot_stays_unknown(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A run recorded here keeps its record: SLURM forgetting a finished job is not a wrong id."""
    from trainctl import Run
    from trainctl.runs.store import RunStore

    fake_slurm(tmp_path / "bin", monkeypatch)
    RunStore().record(Run(target="slurm", native_id="42", job_name="big", created_at=time.time() - 60), "running")
    code, out, _ = cli_says("status", "slurm:42")
    assert code == 0 and "unknown" in out and "submitted: " in out and "elsewhere" not in out


def test_status_of_a_job_slurm_knows_but_this_machine_did_not_submit(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Submitted elsewhere (another login host): its state, and no submit time this machine never saw."""
    fake_slurm(tmp_path / "bin", monkeypatch, known="JobId=42 JobName=x JobState=RUNNING Reason=None ExitCode=0:0")
    code, out, err = cli_says("status", "slurm:42")
    assert code == 0 and "running" in out, err
    assert "submitted: elsewhere (not recorded here)" in out and "0s ago" not in out


def test_cancel_output_json_is_the_record_and_the_status_after(monkeypatch: pytest.MonkeyPatch) -> None:
    """`cancel` had no --output json (status has); its text line stays."""
    from trainctl import Run
    from trainctl.runs.state import RunState, RunStatus
    from trainctl.runs.store import RunStore

    RunStore().record(Run(target="local", native_id="x-1", job_name="small"), state="running")
    cancelled: list[str] = []
    monkeypatch.setattr(Run, "cancel", lambda self: cancelled.append(self.id))
    monkeypatch.setattr(Run, "status", lambda self: RunStatus(state=RunState.CANCELLED, reason="stopped by cancel"))
    code, out, err = cli_says("cancel", "local:x-1", "--output", "json")
    assert code == 0 and cancelled == ["local:x-1"], err
    found = json.loads(out)
    assert found["id"] == "local:x-1" and found["job_name"] == "small"
    assert found["state"] == "cancelled" and found["reason"] == "stopped by cancel"
    code, out, _ = cli_says("cancel", "local:x-1")
    assert code == 0 and out == "local:x-1: cancelled\n"


@pytest.mark.parametrize("run_id", ["local:20200101-000000-none-0000", "sweep:nope"])
def test_cancel_of_an_unknown_run_in_json_is_a_json_error(run_id: str) -> None:
    code, out, _ = cli_says("cancel", run_id, "--output", "json")
    error = json.loads(out)["error"]
    assert code == 2 == error["exit_code"] and error["type"] == "UnknownRunError"


def test_status_says_whether_the_run_uses_deterministic_algorithms(monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 40: `deterministic: auto` resolves in the trainer; `trainctl status` says what it resolved to."""
    from trainctl import Run
    from trainctl.runs.state import Progress, RunState, RunStatus
    from trainctl.runs.store import RunStore

    RunStore().record(Run(target="local", native_id="x-2", job_name="small"), state="running")
    shown = Progress(step=4, total_steps=8, deterministic=False)
    monkeypatch.setattr(Run, "status", lambda self: RunStatus(state=RunState.RUNNING, progress=shown))
    code, out, err = cli_says("status", "local:x-2")
    assert code == 0, err
    assert "  deterministic algorithms: off: faster kernels; a resume restores every state" in out, out
    code, out, _ = cli_says("status", "local:x-2", "--output", "json")
    assert code == 0 and json.loads(out)["progress"]["deterministic"] is False


def test_status_of_a_finished_run_says_its_accuracy_and_how_to_continue_a_stopped_one(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Found by hand (2026-11-27): status of a succeeded digits run named its model but not its accuracy (only
    `submit --wait` printed it), and a cancelled run did not say how to go on from its checkpoint."""
    from trainctl import Run
    from trainctl.runs.state import Progress, RunState, RunStatus
    from trainctl.runs.store import RunStore

    RunStore().record(Run(target="local", native_id="done-1", job_name="digits"), state="succeeded")
    RunStore().record(Run(target="local", native_id="stop-2", job_name="digits"), state="cancelled")
    states = {"local:done-1": RunState.SUCCEEDED, "local:stop-2": RunState.CANCELLED}
    monkeypatch.setattr(
        Run, "status", lambda self: RunStatus(state=states[self.id], progress=Progress(step=90, total_steps=184))
    )
    monkeypatch.setattr(Run, "summary", lambda self: {"val_accuracy": 0.97214, "val_loss": 0.1038, "model": "/m"})
    code, out, err = cli_says("status", "local:done-1")
    assert code == 0 and "  accuracy: 0.9721 (val_loss 0.1038)\n" in out and "continue it" not in out, err + out
    code, out, err = cli_says("status", "local:stop-2")
    assert code == 0 and "accuracy:" not in out, err + out
    assert "  continue it: trainctl submit JOB_FILE --resume-from local:stop-2 (any target)\n" in out, out


def test_the_metrics_table_shows_train_and_eval_rows_and_json_keeps_every_row() -> None:
    """Found by hand: every 20th step's `stragglers` verdict was a row of blanks in the table."""
    from trainctl.runs.curves import table

    rows = [
        {"run": "r", "kind": "train", "step": 20, "loss": 0.5},
        {"run": "r", "kind": "stragglers", "step": 20, "window": 20, "slow": []},
        {"run": "r", "kind": "eval", "step": 23, "val_accuracy": 0.73},
        {"run": "r", "step": 30, "loss": 0.4},  # a command program's row, no kind: a train row
    ]
    lines = table(rows).splitlines()
    assert [line.split()[1] for line in lines[1:]] == ["train", "eval", "30"], lines
    assert not any("stragglers" in line for line in lines)


def test_a_slow_node_seen_in_one_window_names_its_step_and_print_of_a_run_is_its_repr() -> None:
    from trainctl import Run
    from trainctl.runs.records import slow_node_line
    from trainctl.runs.state import SlowNode

    one = SlowNode(node="vm", rank=1, ratio=2.21, first_step=980, last_step=980)
    assert slow_node_line(one) == "vm (rank 1): 2.21x the median compute time (at step 980)"
    run = Run(target="local", native_id="n-1", job_name="fit")
    assert str(run) == repr(run) == "Run(id='local:n-1', job='fit')"

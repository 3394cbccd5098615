"""How a driven run's status reads (targets/kubernetes/driven.py `overlay`): the current attempt's object under
the record on the run's object (attempts.py), for each phase: running, between two attempts, ended, and with
this machine's driver gone without an outcome; once the run's object is deleted (a cancel), the driver's own
record. The drivers themselves run in test_retry_driver.py and test_controller.py."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

from trainctl.runs.state import RunRef, RunState, RunStatus
from trainctl.targets.kubernetes.attempts import ATTEMPTS, OUTCOME, RETRIES_LABEL, current_object
from trainctl.targets.kubernetes.driven import DRIVER, overlay
from trainctl.targets.kubernetes.handle import KubernetesHandle
from trainctl.targets.processes import write_json

ONE = {"number": 1, "engine_id": "ns/digits-ab12", "state": "failed", "cause": "hang", "exit_code": 200,
       "nodes": "n1,n2", "blamed_nodes": ["n2"], "started_at": 10.0, "ended_at": 20.0}  # fmt: skip
TWO = {**ONE, "number": 2, "engine_id": "ns/digits-ab12-a2", "started_at": 21.0, "ended_at": 30.0}


def _run(folder: Path, pid: int | None) -> RunRef:
    handle = KubernetesHandle(api="trainjob", driver_dir=str(folder), driver_pid=pid)
    return RunRef(target="kubernetes", native_id="ns/digits-ab12", job_name="digits", handle=handle)


def _root(ended: list[dict[str, Any]], outcome: dict[str, Any] | None = None) -> dict[str, Any]:
    notes = {ATTEMPTS: json.dumps(ended)} | ({OUTCOME: json.dumps(outcome)} if outcome else {})
    return {
        "metadata": {"name": "digits-ab12", "namespace": "ns", "labels": {RETRIES_LABEL: "2"}, "annotations": notes}
    }


def test_the_runs_object_decides_the_runs_state(tmp_path: Path) -> None:
    running = RunStatus(state=RunState.RUNNING, native_state="Running", reason="pods running")
    failed = RunStatus(state=RunState.FAILED, native_state="Failed", reason="JobFailed")
    cluster: Any = None  # the driver is this machine's: no controller is asked
    # a live process whose command line names the driver (RunFolder.runner_alive checks it)
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)", DRIVER])
    try:
        write_json(tmp_path / "runner.json", {"pid": proc.pid, "started_at": 1.0})
        run, root = _run(tmp_path, proc.pid), _root([ONE])
        assert current_object(root, "digits-ab12") == "digits-ab12-a2"  # what status, logs and cancel read
        st = overlay(run, cluster, root, running)
        assert (st.state, st.reason) == (RunState.RUNNING, "attempt 2: pods running")
        assert [(a.number, a.cause and a.cause.value, a.blamed_nodes) for a in st.attempts] == [(1, "hang", ["n2"])]
        between = overlay(run, cluster, root, failed)  # attempt 2's object ended; not recorded yet
        assert between.state is RunState.RUNNING and "attempt 2 ended (failed)" in between.reason
    finally:
        proc.kill()
        proc.wait()
    lost = overlay(run, cluster, root, running)
    assert lost.state is RunState.RUNNING and lost.reason.startswith("the retry driver on the submitting machine"), lost
    outcome = {"state": "failed", "exit_code": 200, "reason": "attempt 2: hang (exit 200)"}
    done = overlay(run, cluster, _root([ONE, TWO], outcome), failed)
    assert (done.state, done.exit_code, done.reason) == (RunState.FAILED, 200, "attempt 2: hang (exit 200)")
    assert len(done.attempts) == 2 and current_object(_root([ONE, TWO], outcome), "digits-ab12") == "digits-ab12-a2"


def test_a_cancelled_runs_record_is_its_drivers(tmp_path: Path) -> None:
    """`trainctl cancel` deleted the run's object: what this machine's driver recorded is all that is left."""
    gone = RunStatus(state=RunState.UNKNOWN, native_state="NotFound", reason="not found")
    write_json(tmp_path / "runner.json", {"pid": 2**22 + 7, "started_at": 1.0})
    write_json(tmp_path / "exit.json", {"state": "cancelled", "exit_code": None, "reason": "cancelled",
                                        "attempts": [{**ONE, "state": "cancelled", "cause": None}]})  # fmt: skip
    st = overlay(_run(tmp_path, None), None, None, gone)  # type: ignore[arg-type]
    assert st.state is RunState.CANCELLED and [a.state for a in st.attempts] == [RunState.CANCELLED]

"""How a driven run's status reads (targets/kubernetes/driven.py `overlay`): the current attempt's object under
the retry driver's word, for each phase of the driver (detached.RunFolder's): running, between two attempts,
ended, and gone without an outcome. The driver itself runs in test_retry_driver.py."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from trainctl.run_state import RunRef, RunState, RunStatus
from trainctl.targets.kubernetes.driven import DRIVER, current_object, overlay
from trainctl.targets.kubernetes.handle import KubernetesHandle
from trainctl.targets.processes import write_json

ONE = {"number": 1, "engine_id": "ns/digits-ab12", "state": "failed", "cause": "hang", "exit_code": 200,
       "nodes": "n1,n2", "blamed_nodes": ["n2"], "started_at": 10.0, "ended_at": 20.0}  # fmt: skip
TWO = {"number": 2, "engine_id": "ns/digits-ab12-a2", "started_at": 21.0}


def _run(folder: Path, pid: int | None) -> RunRef:
    handle = KubernetesHandle(api="trainjob", driver_dir=str(folder), driver_pid=pid)
    return RunRef(target="kubernetes", native_id="ns/digits-ab12", job_name="digits", handle=handle)


def test_the_driver_decides_the_runs_state(tmp_path: Path) -> None:
    running = RunStatus(state=RunState.RUNNING, native_state="Running", reason="pods running")
    failed = RunStatus(state=RunState.FAILED, native_state="Failed", reason="ReachedMaxRestarts")
    # a live process whose command line names the driver (RunFolder.runner_alive checks it)
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)", DRIVER])
    try:
        write_json(tmp_path / "runner.json", {"pid": proc.pid, "started_at": 1.0})
        write_json(tmp_path / "state.json", {"state": "running", "attempt": 2, "object": "digits-ab12-a2",
                                             "attempts": [ONE, TWO]})  # fmt: skip
        run = _run(tmp_path, proc.pid)
        assert current_object(run) == "digits-ab12-a2"  # what status, logs and cancel read
        st = overlay(run, running)
        assert (st.state, st.reason) == (RunState.RUNNING, "attempt 2: pods running")
        assert [(a.number, a.cause and a.cause.value, a.blamed_nodes) for a in st.attempts] == [
            (1, "hang", ["n2"]), (2, None, [])]  # fmt: skip
        between = overlay(run, failed)  # attempt 2's object ended; the driver has not recorded it yet
        assert between.state is RunState.RUNNING and "attempt 2 ended (failed)" in between.reason
    finally:
        proc.kill()
        proc.wait()
    lost = overlay(run, running)
    assert lost.state is RunState.RUNNING and lost.reason.startswith("the retry driver is gone"), lost
    write_json(tmp_path / "exit.json", {"state": "failed", "exit_code": 200, "reason": "attempt 2: hang (exit 200)",
                                        "object": "digits-ab12-a2", "attempts": [ONE, {**TWO, **ONE, "number": 2}]})  # fmt: skip
    done = overlay(run, failed)
    assert (done.state, done.exit_code, done.reason) == (RunState.FAILED, 200, "attempt 2: hang (exit 200)")
    assert len(done.attempts) == 2

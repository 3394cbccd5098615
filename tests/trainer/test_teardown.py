"""A hung worker is SIGKILLed at once when its attempt is torn down; a healthy one keeps torchrun's grace
(trainer/launcher/teardown.py). Before, a stopped worker held every teardown for torchrun's 30 s."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from trainer.heartbeat import LocalBeat, local_beat_path
from trainer.launcher.teardown import attempt_torn_down, hung_reason

from .conftest import clean_env, launch_cmd

# rank 1 stops itself (SIGSTOP: it can act on no signal but SIGKILL); rank 0 either fails (a worker failure
# tears the attempt down) or waits, and on SIGTERM takes GRACE seconds to "checkpoint", then exits 143
WORKER = """
import os, signal, sys, time
rank, out = int(os.environ["RANK"]), sys.argv[1]
def preempted(*_):
    time.sleep(GRACE)
    open(os.path.join(out, "saved"), "w").close()
    os._exit(143)
signal.signal(signal.SIGTERM, preempted)
open(os.path.join(out, f"up-{rank}"), "w").close()
if rank == 1:
    os.kill(os.getpid(), signal.SIGSTOP)
while not os.path.exists(os.path.join(out, "up-1")):
    time.sleep(0.05)
time.sleep(1.0)
if MODE == "fail":
    open(os.path.join(out, "failed-at"), "w").write(repr(time.time()))
    sys.exit(1)
time.sleep(300)
"""


def start(tmp: Path, mode: str, grace: float = 0.0) -> subprocess.Popen[str]:
    code = WORKER.replace("MODE", repr(mode)).replace("GRACE", repr(grace))
    cmd = launch_cmd("--platform", "local", "--nproc-per-node", "2", "--", sys.executable, "-c", code, str(tmp))
    return subprocess.Popen(cmd, env=clean_env(tmp), stderr=subprocess.PIPE, text=True)


def test_a_stopped_worker_does_not_hold_up_the_teardown_of_a_failed_attempt(tmp_path: Path) -> None:
    launcher = start(tmp_path, "fail")
    _, err = launcher.communicate(timeout=90)
    took = time.time() - float((tmp_path / "failed-at").read_text())  # from rank 0's failure to the launcher's end
    assert took < 15, f"the launcher took {took:.1f} s (torchrun's 30 s grace for the stopped worker?)\n{err[-2000:]}"
    assert launcher.returncode == 1, err[-3000:]
    assert "local rank 1" in err and "is hung (stopped (state T))" in err, err[-3000:]


def test_on_sigterm_the_stopped_worker_dies_at_once_and_the_healthy_one_keeps_its_grace(tmp_path: Path) -> None:
    launcher = start(tmp_path, "wait", grace=3.0)
    deadline = time.monotonic() + 60
    while not (tmp_path / "up-0").exists() or not (tmp_path / "up-1").exists():
        assert time.monotonic() < deadline and launcher.poll() is None, "the workers did not start"
        time.sleep(0.05)
    time.sleep(2.0)  # rank 1 stopped, rank 0 past its start-up
    began = time.monotonic()
    launcher.send_signal(signal.SIGTERM)
    _, err = launcher.communicate(timeout=90)
    took = time.monotonic() - began
    assert took < 15, f"teardown took {took:.1f} s (torchrun's 30 s grace for the stopped worker?)\n{err[-2000:]}"
    assert took >= 3.0 and (tmp_path / "saved").exists(), f"rank 0 lost its grace\n{err[-3000:]}"
    assert "local rank 1 (pid" in err and "is hung (stopped" in err and "local rank 0 (pid" not in err, err[-3000:]
    assert launcher.returncode == 143, err[-3000:]


def test_a_stale_heartbeat_or_a_declared_hang_makes_a_running_worker_hung(tmp_path: Path) -> None:
    status = tmp_path / "status.json"
    worker = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        assert hung_reason(worker.pid, status) is None  # no evidence: it keeps its grace
        beat = local_beat_path(status, worker.pid)
        now = time.time()
        beat.write_text(json.dumps(LocalBeat(at=now - 5, deadline_s=10).__dict__))
        assert hung_reason(worker.pid, status, now=now) is None  # a beat within its deadline
        beat.write_text(json.dumps(LocalBeat(at=now - 11, deadline_s=10).__dict__))
        assert (hung_reason(worker.pid, status, now=now) or "").startswith("no heartbeat for 11.0 s")
        beat.unlink()
        status.write_text(json.dumps({"status": "preempted"}))
        assert hung_reason(worker.pid, status) is None
        status.write_text(json.dumps({"status": "hang", "message": "hang declared by rank 0"}))
        assert hung_reason(worker.pid, status) == "a hang was declared for this attempt"
    finally:
        worker.kill()
        worker.wait()
    assert hung_reason(worker.pid, status) is None  # gone: nothing to kill


def test_workers_started_but_never_handed_to_the_agent_do_not_outlive_the_launcher(tmp_path: Path) -> None:
    """torch's window (teardown.attempt_torn_down): a SIGTERM after `PContext.start` spawned the workers and
    before `start_processes` returned left the agent without the context, and the workers running on their
    own after the launcher exited. Here the real `start_processes` spawns two and the signal's exception
    escapes before anything keeps the context: on the way out both are stopped."""
    from torch.distributed.elastic.multiprocessing import DefaultLogsSpecs, start_processes
    from torch.distributed.elastic.multiprocessing.api import SignalException

    said: list[str] = []
    pids: list[int] = []
    handlers = {sig: signal.getsignal(sig) for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGQUIT)}
    try:
        with attempt_torn_down(tmp_path / "status.json", said.append):
            context = start_processes(name="w", entrypoint="sleep", args={0: ("600",), 1: ("600",)},
                                      envs={0: {}, 1: {}}, logs_specs=DefaultLogsSpecs(log_dir=str(tmp_path)))  # fmt: skip
            pids = list(context.pids().values())
            del context  # what the agent never got to keep
            raise SignalException("SIGTERM", sigval=signal.SIGTERM)
    except SignalException:
        pass
    finally:
        for sig, handler in handlers.items():  # PContext.start installed torch's in this (pytest's) process
            signal.signal(sig, handler)
    assert len(pids) == 2
    for pid in pids:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            continue
        os.kill(pid, signal.SIGKILL)
        raise AssertionError(f"worker {pid} outlived the launcher")
    assert said and "never handed to torchrun's agent" in said[0], said


def test_a_sigterm_while_the_workers_spawn_stops_every_worker_started(tmp_path: Path, monkeypatch) -> None:
    """The second window (teardown.spawn_then_signal): torch builds `subprocess_handlers` in one dict
    comprehension, so a SIGTERM's exception after rank 1's `Popen` and before the dict was stored left
    `_close` nothing to stop (CI: both workers outlived a launcher stopped during start-up). Here the real
    signal arrives right after rank 1 is spawned, before the comprehension ends."""
    from torch.distributed.elastic.multiprocessing import DefaultLogsSpecs, api, start_processes
    from torch.distributed.elastic.multiprocessing.api import SignalException

    spawned: list[int] = []
    real_handler = api.get_subprocess_handler

    def spawn_then_sigterm(**kwargs: object) -> object:
        handler = real_handler(**kwargs)  # type: ignore[arg-type]
        spawned.append(handler.proc.pid)
        if kwargs["local_rank_id"] == 1:
            signal.raise_signal(signal.SIGTERM)  # torch's handler raises SignalException at once
        return handler

    monkeypatch.setattr(api, "get_subprocess_handler", spawn_then_sigterm)
    said: list[str] = []
    handlers = {sig: signal.getsignal(sig) for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGQUIT)}
    raised = None
    try:
        with attempt_torn_down(tmp_path / "status.json", said.append):
            start_processes(name="w", entrypoint="sleep", args={0: ("600",), 1: ("600",)},
                            envs={0: {}, 1: {}}, logs_specs=DefaultLogsSpecs(log_dir=str(tmp_path)))  # fmt: skip
    except SignalException as exc:
        raised = exc
    finally:
        for sig, handler in handlers.items():
            signal.signal(sig, handler)
    assert raised is not None and raised.sigval == signal.SIGTERM  # the signal is still the launcher's outcome
    assert len(spawned) == 2
    outlived = []
    for pid in spawned:
        with contextlib.suppress(ChildProcessError):
            os.waitpid(pid, os.WNOHANG)
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            continue
        os.kill(pid, signal.SIGKILL)
        outlived.append(pid)
    assert not outlived, f"workers {outlived} outlived the launcher"

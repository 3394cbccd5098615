"""Tear an attempt down without the grace a hung worker cannot use.

When an attempt ends (a worker failed, or the launcher got SIGTERM), torchrun's agent SIGTERMs every
worker and waits up to 30 s before it SIGKILLs the ones still alive: `LocalElasticAgent._stop_workers`
calls `self._shutdown()` with its default `timeout=30`, the SIGTERM path calls
`self._shutdown(e.sigval, timeout=self._shutdown_timeout)` (30 unless `--shutdown-timeout`), and both
end in `PContext.close(death_sig, timeout)` -> `_close`, which signals, joins for `timeout`, then sends
SIGKILL (torch 2.13: torch/distributed/elastic/agent/server/local_elastic_agent.py `_shutdown`,
torch/distributed/elastic/agent/server/api.py `run`, torch/distributed/elastic/multiprocessing/api.py
`MultiprocessContext._close` / `SubprocessContext._close`). A healthy worker needs that grace: its
SIGTERM handler checkpoints and exits 143. A hung one cannot act on SIGTERM at all (stopped, or its
main thread inside a C++ collective, where Python's signal handlers never run), so for it the 30 s
buy nothing: bench/recovery.py measured 49.7 s from a hang to training again, 30 of them here.

The rule, from evidence this node has on its own (no network: a cut-off node must decide too). At
teardown a live worker is hung, and is SIGKILLed at once, when any of these holds:

1. its process is stopped: state `T` or `t` in /proc/PID/stat (SIGSTOP, a debugger), read with
   torch's own `read_proc_state` (the one its D-state check uses);
2. its node-local heartbeat (`heartbeat.publish_local`, written by the hang watchdog thread, which
   runs while the main thread is stuck in C++) is older than the hang deadline it carried: the
   watchdog itself no longer runs;
3. a hang was declared for this attempt: a worker on this node wrote `hang` to the launcher's status
   file (`status.py`; each launcher has its own, per attempt). Every live rank has then dumped its
   stacks and leaves by itself (`os._exit`): whatever is still alive at teardown is stuck.

Every other worker keeps torch's grace: a preemption still checkpoints. The hook wraps
`PContext.close` for the launcher's in-process `run()` only (torch has no teardown hook of its own);
torch's `_close` then sends its SIGTERM and finds the hung workers already gone. The same hook closes a
context torch started but never kept, and holds a signal back while the workers spawn (`attempt_torn_down`):
no worker outlives its launcher.
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

from ..heartbeat import read_local
from ..status import read_status

STOPPED_STATES = frozenset("Tt")  # stopped (SIGSTOP / SIGTSTP), stopped by a tracer


def proc_state(pid: int) -> str | None:
    """The state letter of /proc/PID/stat, None when the process is gone; torch's reader where torch has one
    (2.13 does; older builds, such as a GPU machine's preinstalled torch, may not)."""
    try:
        from torch.distributed.elastic.utils.process_state import read_proc_state
    except ImportError:
        try:
            stat = Path(f"/proc/{pid}/stat").read_text()
        except OSError:
            return None
        return stat.rpartition(")")[2].split()[0]  # the name in parentheses may hold spaces and ')'
    return read_proc_state(pid)


def hung_reason(pid: int, status_file: Path, now: float | None = None) -> str | None:
    """Why worker `pid` cannot act on SIGTERM (rules 1-3 of the module's docstring), or None: it keeps its grace."""
    state = proc_state(pid)
    if state is None:
        return None  # gone already
    if state in STOPPED_STATES:
        return f"stopped (state {state})"
    beat = read_local(status_file, pid)
    now = time.time() if now is None else now
    if beat is not None and now - beat.at > beat.deadline_s:
        return f"no heartbeat for {now - beat.at:.1f} s (hang deadline {beat.deadline_s:.1f} s)"
    if read_status(status_file).get("status") == "hang":
        return "a hang was declared for this attempt"
    return None


def kill_hung(pids: dict[int, int], status_file: Path, say: Callable[[str], None]) -> list[int]:
    """SIGKILL every hung worker (a stopped process dies of SIGKILL too); the local ranks killed."""
    killed = []
    for local_rank, pid in sorted(pids.items()):
        why = hung_reason(pid, status_file)
        if why is None:
            continue
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
            killed.append(local_rank)
            say(f"local rank {local_rank} (pid {pid}) is hung ({why}): SIGKILL now, not torchrun's 30 s SIGTERM grace")
    return killed


@contextlib.contextmanager
def attempt_torn_down(status_file: Path, say: Callable[[str], None]) -> Iterator[None]:
    """While torchrun's `run()` runs in this process: each `PContext.close` first kills the hung workers, and a
    started `PContext` that `run()` never closed is closed on the way out, so no worker outlives the launcher.

    torch leaves that gap: `LocalElasticAgent._start_workers` keeps the context only once `start_processes`
    returns (`self._pcontext = start_processes(...)`), `PContext.start` installs the SIGTERM handler that
    raises `SignalException` before it spawns the workers and starts their log tailers, and `_shutdown`
    closes only `self._pcontext`. A SIGTERM in between left both workers running on their own (each in a
    session of its own) after the launcher exited 143; CI caught two of them still alive 25 minutes on.

    A second gap is inside the spawn: `SubprocessContext._start` builds `subprocess_handlers` in one dict
    comprehension, so a signal's exception while a worker's `Popen` waits for its exec (or between two
    workers) leaves the dict empty, and `_close` (`if not self.subprocess_handlers: return`) stops nothing.
    Torch's own signals are therefore held back until the spawn returns (`spawn_then_signal`)."""
    from torch.distributed.elastic.multiprocessing.api import PContext, SubprocessContext

    original_start, original_close = PContext.start, PContext.close
    original_spawn = SubprocessContext._start
    open_contexts: list[PContext] = []

    def start(self: PContext) -> None:
        open_contexts.append(self)  # before the spawn: a signal may come at any point inside it
        original_start(self)

    def close(self: PContext, death_sig: signal.Signals | None = None, timeout: int = 30) -> None:
        if self in open_contexts:
            open_contexts.remove(self)
        if death_sig != signal.SIGKILL:
            try:
                pids = self.pids()
            except Exception:  # not started, or already closed: nothing of ours to decide
                pids = {}
            kill_hung(pids, status_file, say)
        original_close(self, death_sig, timeout)

    def spawn(self: SubprocessContext) -> None:
        spawn_then_signal(lambda: original_spawn(self))

    PContext.start, PContext.close = start, close  # type: ignore[method-assign]
    SubprocessContext._start = spawn  # type: ignore[method-assign]
    try:
        yield
    finally:
        try:
            for context in list(open_contexts):
                say("workers started but never handed to torchrun's agent: stopping them (SIGTERM, then its grace)")
                close(context, signal.SIGTERM)
        finally:
            PContext.start, PContext.close = original_start, original_close  # type: ignore[method-assign]
            SubprocessContext._start = original_spawn  # type: ignore[method-assign]


def torch_signals() -> list[signal.Signals]:
    """The signals torch's `PContext.start` turns into `SignalException` (TORCHELASTIC_SIGNALS_TO_HANDLE)."""
    names = os.environ.get("TORCHELASTIC_SIGNALS_TO_HANDLE", "SIGTERM,SIGINT,SIGHUP,SIGQUIT").split(",")
    found = [getattr(signal, name.strip(), None) for name in names]
    return [sig for sig in found if isinstance(sig, signal.Signals)]


def spawn_then_signal(spawn: Callable[[], None]) -> None:
    """Run `spawn` with torch's signals recorded instead of handled, then hand the first one recorded to the
    handler that was in place: its exception then leaves a context that knows every worker it started."""
    if threading.current_thread() is not threading.main_thread():
        spawn()  # signal handlers can be set from the main thread only, and only it receives signals
        return
    held: list[int] = []
    handlers = {sig: signal.getsignal(sig) for sig in torch_signals()}
    for sig in handlers:
        signal.signal(sig, lambda signum, _frame: held.append(signum))
    try:
        spawn()
    finally:
        for sig, handler in handlers.items():
            signal.signal(sig, handler)
        if held:
            handler = handlers[signal.Signals(held[0])]
            if callable(handler):
                handler(held[0], None)
            else:  # default or ignored: what it would have done had it arrived a moment later
                signal.raise_signal(held[0])

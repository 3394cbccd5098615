"""`python -m trainctl.targets.local.supervisor RUN_DIR`: the detached parent of one local run.

Started by `targets.local.submit` in a new session. It starts the job from RUN_DIR/spec.json with
its output in RUN_DIR/log.txt, enforces max_runtime, retries failed attempts, forwards SIGTERM
(cancel), kills every leftover descendant (as a child subreaper, orphaned torchrun workers come
back to it), and writes RUN_DIR/exit.json, so the outcome is known after the CLI has exited.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from ...runs import causes
from ..detached import RunFolder, StopSignals
from ..processes import RUN_DIR_ENV, alive, descendants, process_started, read_json, terminate_tree, write_json
from . import container_runtime
from .causes import classify

GRACE_S = 12.0
PR_SET_CHILD_SUBREAPER = 36


def _become_subreaper() -> None:
    """Orphaned grandchildren re-parent to us instead of init, so none escapes the cleanup."""
    if sys.platform.startswith("linux"):
        with contextlib.suppress(OSError, AttributeError):
            ctypes.CDLL(None, use_errno=True).prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)


def _reap() -> None:
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return


def _cleanup(grace_s: float) -> None:
    """No process of the run survives its runner."""
    for _ in range(3):
        left = descendants(os.getpid())
        if not left:
            break
        terminate_tree(left, grace_s)
        _reap()


def _log(log: Any, text: str) -> None:
    log.write(f"[trainctl] {text}\n".encode())
    log.flush()


def _attempt(
    spec: dict[str, Any],
    env: dict[str, str],
    log: Any,
    deadline: float | None,
    entry: dict[str, Any],
    stop: StopSignals,
) -> tuple[int, str]:
    """Run the job once; (exit code, reason when stopped by trainctl). `entry` gets the job's pid, the id of
    this attempt."""
    proc = subprocess.Popen(
        spec["argv"], cwd=spec["cwd"], env=env, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT
    )
    entry["engine_id"] = f"pid {proc.pid}"
    write_json(Path(spec["run_dir"]) / "job.pid", {"pid": proc.pid, "started": process_started(proc.pid)})
    reason = ""
    stop_at: float | None = None
    while True:
        try:
            code = proc.wait(timeout=0.2)
            break
        except subprocess.TimeoutExpired:
            pass
        now = time.monotonic()
        if stop_at is None and (stop or (deadline is not None and now >= deadline)):
            reason = "cancelled" if stop else f"max_runtime of {spec['max_runtime_s']}s exceeded"
            _log(log, f"{reason}: sending SIGTERM to the job")
            if spec.get("container"):
                container_runtime.stop(spec["container"], "TERM")  # to trainer-launch, PID 1 of the container
            else:
                proc.send_signal(signal.SIGTERM)
            stop_at = now + GRACE_S
        elif stop_at is not None and now >= stop_at:
            _log(log, f"still running {GRACE_S:g}s after SIGTERM: killing every process of the run")
            if spec.get("container"):
                container_runtime.stop(spec["container"], "KILL")
            for pid in [proc.pid, *descendants(os.getpid())]:
                if alive(pid):
                    os.kill(pid, signal.SIGKILL)
            stop_at = now + 3600
    return code, reason


def _newest_step(checkpoint_dir: str | None) -> int | None:
    """The newest published checkpoint's step: where the attempt about to start resumes from (the trainer
    picks it, or an older one if it does not verify; its log says which)."""
    if not checkpoint_dir or "$" in checkpoint_dir:
        return None
    with contextlib.suppress(OSError):
        steps = [
            int(p.name[5:]) for p in Path(checkpoint_dir).iterdir() if p.name[5:].isdigit() and p.name[:5] == "step-"
        ]
        return max(steps) if steps else None
    return None


def _ended(spec: dict[str, Any], entry: dict[str, Any], code: int, reason: str, used: set[Any]) -> dict[str, Any]:
    """The attempt's record once it ended: its cause from the exit code and this attempt's failure.json (not one
    an earlier attempt's record already used: `used` holds their times)."""
    output_dir = spec.get("output_dir")
    record = read_json(Path(output_dir) / "failure.json") if output_dir and "$" not in output_dir else None
    record = causes.failure_of_attempt(record if isinstance(record, dict) else None, entry["started_at"])
    if record is not None and record.get("time") in used:
        record = None
    used.add(record.get("time") if record else None)
    done = {**entry, "ended_at": time.time(), "exit_code": code, "state": "succeeded" if code == 0 else "failed"}
    if reason:
        return {**done, "state": "cancelled" if reason == "cancelled" else "failed", "reason": reason}
    if code != 0:
        end = classify(code, record)
        done.update(cause=end.cause.value if end.cause else None, blamed_nodes=list(end.blamed))
    return done


def main(run_dir: Path) -> int:
    spec = read_json(run_dir / "spec.json")
    if not isinstance(spec, dict):
        print(f"local supervisor: no readable spec.json in {run_dir}", file=sys.stderr)
        return 2
    spec["run_dir"] = str(run_dir)
    _become_subreaper()
    stop = StopSignals()
    folder = RunFolder(run_dir, "trainctl.targets.local.supervisor")
    started = folder.announce()
    # The caller's platform variables (trainctl itself inside a SLURM job, a pod or torchrun) stay: the
    # launcher runs with `--platform local` and drops them itself, from the one list it owns.
    env = {**os.environ, **spec["env"]}
    env[RUN_DIR_ENV] = str(run_dir)  # every process of the job inherits it: cancel and status find them by it
    deadline = time.monotonic() + spec["max_runtime_s"] if spec.get("max_runtime_s") else None
    result: dict[str, Any]
    with open(run_dir / "log.txt", "ab", buffering=0) as log:
        try:
            for name, path in spec.get("secret_files", {}).items():
                env[name] = Path(path).read_text().rstrip("\n")
        except OSError as exc:
            _log(log, f"cannot read a secret file: {exc}")
            folder.record({"state": "failed", "exit_code": None, "reason": str(exc)})
            return 1
        for made in (spec.get("output_dir"), spec.get("checkpoint_dir"), spec.get("cwd")):
            if made and "$" not in made:
                Path(made).mkdir(parents=True, exist_ok=True)
        if spec.get("container"):
            c = spec["container"]
            _log(log, f"container {c['name']}: {c['runtime']} image {c['image']} (id {c['image_id']})")
        retries = int(spec.get("retries", 0))
        retry_on = spec.get("retry_on", [c.value for c in causes.DEFAULT_RETRY_ON])
        code, reason = 1, ""
        history: list[dict[str, Any]] = []
        used: set[Any] = set()
        for attempt in range(1, retries + 2):
            if stop or folder.cancel_requested:
                reason = "cancelled"
                break
            entry = {"number": attempt, "engine_id": "", "started_at": time.time(),
                     "resumed_from_step": _newest_step(spec.get("checkpoint_dir"))}  # fmt: skip
            folder.mark_running(attempt=attempt, attempts=[*history, entry])
            try:
                code, reason = _attempt(spec, env, log, deadline, entry, stop)
            except OSError as exc:
                _log(log, f"could not start {spec['argv'][0]}: {exc}")
                code, reason = 127, f"could not start {spec['argv'][0]}: {exc}"
                break
            _cleanup(3.0)
            history.append(_ended(spec, entry, code, reason, used))
            if code == 0 or reason:
                break
            cause = causes.Cause(history[-1]["cause"])
            why = causes.why_not_retried(cause, retry_on, attempt, retries)
            end = causes.AttemptEnd(cause, tuple(history[-1]["blamed_nodes"]), code)
            _log(log, causes.end_line(attempt, end, why, attempt, retries))
            if why:
                break
        if reason == "cancelled" or stop or folder.cancel_requested:
            result = {"state": "cancelled", "exit_code": code, "reason": "cancelled"}
        elif code == 0:
            result = {"state": "succeeded", "exit_code": 0, "reason": ""}
        else:
            result = {"state": "failed", "exit_code": code, "reason": reason or f"exit code {code}"}
        _log(log, f"run {result['state']} (exit code {code})")
    _cleanup(3.0)
    if spec.get("container"):
        container_runtime.remove(spec["container"])
    result["started_at"] = started  # with finished_at, `trainctl status` shows the duration
    result["attempts"] = history
    folder.record(result)
    return 0


if __name__ == "__main__":
    sys.exit(main(Path(sys.argv[1])))

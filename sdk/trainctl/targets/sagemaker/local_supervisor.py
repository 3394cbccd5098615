"""`python -m trainctl.targets.sagemaker.local_supervisor RUN_DIR`: the detached parent of one local SageMaker run.

Started by local_engine.submit in a new session, with the containers already created (RUN_DIR/cluster.json).
It starts them, streams each host's log into RUN_DIR/logs/<host>.log (`RUNTIME logs -f`), stops them
with SIGTERM when MaxRuntimeInSeconds passes (as SageMaker does) or when it is signalled, waits, merges
the archives and writes RUN_DIR/exit.json: per-host exit codes and the failure line of /opt/ml/output/failure.
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from ..detached import RunFolder, StopSignals
from . import local_hosts
from .local_engine import LOG_DIR, RUNNER

GRACE_S = 15.0


def _wait(cluster: local_hosts.Cluster, stop: StopSignals) -> tuple[dict[str, int], str]:
    """Every host's exit code (`RUNTIME wait`, one per host); the reason when trainctl stopped them."""
    waiters = {
        host: subprocess.Popen([cluster.runtime, "wait", name], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
        for host, name in cluster.names.items()
    }
    codes: dict[str, int] = {}
    deadline = time.monotonic() + cluster.max_runtime_s if cluster.max_runtime_s else None
    reason, kill_at = "", None
    while len(codes) < len(cluster.hosts):
        for host, waiter in waiters.items():
            if host not in codes and waiter.poll() is not None:
                out = (waiter.stdout.read() if waiter.stdout else b"").decode().split()
                codes[host] = int(out[-1]) if waiter.returncode == 0 and out else -1  # -1: removed
        now = time.monotonic()
        if not reason and (stop or (deadline is not None and now >= deadline)):
            reason = "stopped" if stop else f"MaxRuntimeExceeded: {cluster.max_runtime_s}s"
            local_hosts.signal_all(cluster, "TERM")
            kill_at = now + GRACE_S
        elif kill_at is not None and now >= kill_at:
            local_hosts.remove(cluster)
            kill_at = None
        time.sleep(0.2)
    return codes, reason


def main(run_dir: Path) -> int:
    cluster = local_hosts.Cluster.load(run_dir / "cluster.json")
    stop = StopSignals()
    folder = RunFolder(run_dir, RUNNER)
    folder.announce()
    followers: list[subprocess.Popen[bytes]] = []
    result: dict[str, Any]
    codes: dict[str, int] = {}
    reason = "stopped"
    try:
        if not folder.cancel_requested:
            local_hosts.start(cluster)
            folder.mark_running()
            for host, name in cluster.names.items():
                with open(run_dir / LOG_DIR / f"{host}.log", "ab") as log:
                    followers.append(
                        subprocess.Popen(
                            [cluster.runtime, "logs", "-f", name], stdout=log, stderr=subprocess.STDOUT, cwd=run_dir
                        )
                    )
            codes, reason = _wait(cluster, stop)
        for follower in followers:
            try:
                follower.wait(timeout=30)
            except subprocess.TimeoutExpired:
                follower.kill()
        failure, model_tar, _ = local_hosts.collect(cluster)
        if folder.cancel_requested or reason == "stopped":
            result = {"state": "cancelled", "reason": "stopped by trainctl cancel"}
        elif codes and all(code == 0 for code in codes.values()):
            result = {"state": "succeeded", "reason": ""}
        else:
            bad = ", ".join(f"{h} exited {c}" for h, c in codes.items() if c != 0)
            result = {"state": "failed", "reason": reason or failure or bad}
            if reason:  # SageMaker ends such a job as Stopped/MaxRuntimeExceeded; trainctl counts it failed
                result["native_state"] = "Stopped/MaxRuntimeExceeded"
        result.update(exit_codes=codes, failure=failure, model_artifacts=str(model_tar))
    except Exception as exc:  # the runtime failed under us: say so in the record, not only in runner.err
        result = {"state": "failed", "reason": f"{type(exc).__name__}: {exc}"}
    finally:
        local_hosts.remove(cluster)
    folder.record(result)
    return 0


if __name__ == "__main__":
    sys.exit(main(Path(sys.argv[1])))

"""`python -m trainctl.targets.kubernetes.driver RUN_DIR`: this machine's retry driver of one Kubernetes run,
for clusters without trainctl's controller (driven.py).

Started by `submit` in a session of its own, after it created the run's object. It runs the controller's
steps (reconcile.Runs.step) for this one run until it ends, and records each attempt on the run's object as
the controller does, so any machine's `trainctl status` reads them. `trainctl cancel` (the cancel file,
SIGTERM) stops it: it records the run cancelled and deletes its objects. Its folder is detached.RunFolder's,
as the local runner keeps it: spec.json (the cluster and the run's object), runner.json, state.json,
cancel, exit.json.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Any

from ...errors import EngineError
from ...runs.state import RunState
from ..detached import RunFolder, StopSignals
from ..processes import read_json
from .attempts import attempt_name, record_of
from .cluster import connect
from .driven import DRIVER, SPEC
from .kinds import KINDS
from .objects import get_job
from .reconcile import PodMemory, Runs

STEP_S = 1.0
"""Seconds between two steps (and looks at the cancel file)."""


def log(text: str) -> None:
    print(f"[trainctl driver {time.strftime('%H:%M:%S')}] {text}", file=sys.stderr, flush=True)


def main(run_dir: Path) -> int:
    spec = read_json(run_dir / SPEC)
    if not isinstance(spec, dict):
        print(f"kubernetes retry driver: no readable {SPEC} in {run_dir}", file=sys.stderr)
        return 2
    stop = StopSignals()
    folder = RunFolder(run_dir, DRIVER)
    folder.announce()
    try:
        result = drive(spec, folder, stop)
    except Exception as exc:  # the outcome is recorded whatever went wrong: status says it, not "lost"
        log(f"the driver failed: {exc!r}")
        found = read_json(run_dir / "state.json") or {}
        result = {"state": "failed", "exit_code": None, "reason": f"the retry driver failed: {exc}",
                  **{k: found[k] for k in ("object", "attempt", "attempts") if k in found}}  # fmt: skip
    folder.record(result)
    return 0


def drive(spec: dict[str, Any], folder: RunFolder, stop: StopSignals) -> dict[str, Any]:
    """Every attempt of the run, to its outcome (exit.json's fields)."""
    kind, first = KINDS[spec["api"]], str(spec["first"])
    cluster = connect(spec["context"], spec["namespace"], spec["kubeconfig"])
    runs = Runs(cluster, PodMemory(cluster, spec["namespace"], log).start(), log)
    last: dict[str, Any] = {}
    while True:
        try:
            run = get_job(cluster, first, kind)
        except EngineError as exc:  # the API server briefly away: try again
            log(f"reading {kind.kind} {first}: {exc}")
            time.sleep(5.0)
            continue
        if run is None:  # deleted: `trainctl cancel` from elsewhere, or `kubectl delete`
            return _cancelled(last, first, spec["namespace"])
        record = record_of(run)
        ended = [a.model_dump(mode="json") for a in record.ended]
        last = {"object": attempt_name(first, record.current), "attempt": record.current, "attempts": ended}
        if stop or folder.cancel_requested:
            return runs.cancel(kind, run) | _cancelled(last, first, spec["namespace"], outcome_only=False)
        folder.mark_running(**last)
        outcome: dict[str, Any] | None = None
        try:
            outcome = runs.step(kind, run)
        except EngineError as exc:
            log(f"{first}: {exc}")
        if outcome is not None:
            done = record_of(get_job(cluster, first, kind) or run)
            return outcome | {"object": attempt_name(first, done.current), "attempt": done.current,
                              "attempts": [a.model_dump(mode="json") for a in done.ended]}  # fmt: skip
        time.sleep(STEP_S)


def _cancelled(last: dict[str, Any], first: str, namespace: str, outcome_only: bool = True) -> dict[str, Any]:
    """The run cancelled during attempt `last["attempt"]`: that attempt recorded cancelled."""
    number = int(last.get("attempt") or 1)
    name = str(last.get("object") or first)
    attempts = [*(last.get("attempts") or []), {"number": number, "engine_id": f"{namespace}/{name}", "state": RunState.CANCELLED.value,
                                                 "ended_at": time.time()}]  # fmt: skip
    facts = {"object": name, "attempt": number, "attempts": attempts}
    return ({"state": "cancelled", "exit_code": None, "reason": "cancelled"} | facts) if outcome_only else facts


if __name__ == "__main__":
    sys.exit(main(Path(sys.argv[1])))

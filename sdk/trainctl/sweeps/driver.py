"""The sweep driver: a detached process (`python -m trainctl.sweeps.driver SWEEP_DIR`) that keeps at most
`parallel` trials running, submits the next as a slot frees up, applies the median rule, and records each
trial's run in trials.json, so the sweep goes on after the CLI or the notebook has exited.

If it dies (killed, the machine rebooted), the trials it started go on (each is a full run on its
target); it only stops starting new ones. `trainctl sweep status` sees that the driver is gone while trials
are still to run and starts it again; the new driver first adopts a run of this sweep that the run store
has but trials.json lacks (a driver killed between a submit and its record: it submits in index order,
one at a time, so that run is the first trial still pending), so no trial runs twice.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import time
from pathlib import Path
from types import FrameType

from ..errors import TrainctlError
from ..run import Run
from ..runs.store import RunStore
from ..spec.sweep import params_text
from ..submit.runner import submit
from ..targets.lookup import get_target
from . import metric, store
from .median import to_stop
from .store import SweepRecord, Trial
from .trials import marked, rebuilt, trial_job

POLL_S = 0.5
_STOPPING = False


def _on_term(signum: int, frame: FrameType | None) -> None:
    global _STOPPING
    _STOPPING = True


def adopt(record: SweepRecord, trials: list[Trial]) -> bool:
    """Give the first pending trial a run of this sweep that trials.json does not name (see the docstring)."""
    known = {t.run_id for t in trials if t.run_id}
    lost = [r.run for r in RunStore().list(target=record.target) if r.run.sweep_id == record.id]
    lost = sorted((r for r in lost if r.id not in known), key=lambda r: r.created_at)
    pending = [t for t in trials if t.run_id is None and t.error is None]
    for run, trial in zip(lost, pending, strict=False):
        trial.run_id = run.id
    return bool(lost and pending)


def running_states(record: SweepRecord, trials: list[Trial]) -> dict[int, Run]:
    """{index: run} of the trials whose runs have not finished, their states asked of the engine now."""
    runs = {t.index: Run.from_id(t.run_id) for t in trials if t.run_id}
    store_ = RunStore()
    last = {r.id: r.state for r in store_.list(target=record.target) if r.run.sweep_id == record.id}
    open_ = {i: r for i, r in runs.items() if r.id not in last or not last[r.id].finished}
    if open_:
        with contextlib.suppress(TrainctlError):
            statuses = get_target(record.target).status_many(list(open_.values()))
            store_.save_statuses(statuses)  # one transaction, not one per trial (1,000 per poll: docs/scale.md)
            last.update((run_id, status.state) for run_id, status in statuses.items())
    return {i: r for i, r in open_.items() if not (r.id in last and last[r.id].finished)}


def early_stop(where: Path, record: SweepRecord, trials: list[Trial], running: dict[int, Run]) -> None:
    """Stop each running trial the median rule names: recorded and logged first, then cancelled (SIGTERM:
    the trainer checkpoints and exits)."""
    rule, spec = record.spec.early_stopping, record.spec
    if rule is None or not running:
        return
    runs = {t.index: running.get(t.index) or Run.from_id(t.run_id) for t in trials
            if t.run_id and t.stopped_early is None}  # fmt: skip
    read = metric.points_many(list(runs.values()), spec.metric)  # together: SLURM reads every file in one call
    found = {index: read[run.id] for index, run in runs.items()}
    for index, why in to_stop(found, set(running), rule, spec.metric, spec.mode).items():
        run = running[index]
        trials[index].stopped_early = why
        store.save_trials(where, trials)
        store.say(where, f"trial {index} ({run.id}) stopped early: {why}")
        if run.paths.log and os.path.isfile(run.paths.log):
            with open(run.paths.log, "a") as fh:
                fh.write(f"trainctl sweep {record.id}: stopped early: {why}\n")
        with contextlib.suppress(TrainctlError):
            run.cancel()


def drive(where: Path) -> int:
    """The loop; 0 at once when another driver of this sweep holds its lock (two `sweep status` at once)."""
    lock = store.take_driver_lock(where)
    if lock is None:
        return 0
    record, trials = store.load(where.name)
    store.write_json(where / "driver.json", {"pid": os.getpid(), "started_at": time.time()})
    base = rebuilt(record.job, record.base_dir)
    if adopt(record, trials):
        store.save_trials(where, trials)
    limit = len(trials) if get_target(record.target).queues_trials(base) else record.spec.parallel
    while not _STOPPING and not (where / "cancel").exists():
        running = running_states(record, trials)
        early_stop(where, record, trials, running)
        pending = [t for t in trials if t.run_id is None and t.error is None]
        for trial in pending[: max(0, limit - len(running))]:
            if _STOPPING or (where / "cancel").exists():
                break
            try:
                job = marked(trial_job(base, trial.params, trial.index), record.target, record.id, trial.index)
                run = submit(job, record.target, sweep_id=record.id, **record.options)
            except TrainctlError as exc:
                trial.error = str(exc)
                store.say(where, f"trial {trial.index} could not be submitted: {exc}")
            else:
                trial.run_id = run.id
                running[trial.index] = run
                store.say(where, f"trial {trial.index} ({params_text(trial.params)}) submitted as {run.id}")
            store.save_trials(where, trials)
        if not running and not any(t.run_id is None and t.error is None for t in trials):
            store.say(where, f"all {len(trials)} trials have ended")
            (where / "done").touch()
            return 0
        time.sleep(POLL_S)
    store.say(where, "driver stopped: the sweep was cancelled" if (where / "cancel").exists() else "driver stopped")
    return 0


def main() -> None:
    signal.signal(signal.SIGTERM, _on_term)
    signal.signal(signal.SIGINT, _on_term)
    sys.exit(drive(Path(sys.argv[1])))


if __name__ == "__main__":
    main()

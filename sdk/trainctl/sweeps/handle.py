"""The one handle of a sweep: start it, read its trials best first, cancel every trial.

`Job.sweep(...)` and `trainctl sweep` start one; `Sweep.from_id("sweep:<id>")` finds it again.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
import signal
import time
from pathlib import Path
from typing import Any

from ..errors import EngineError, TrainctlError, UsageError
from ..run import Run
from ..runs import removal as run_removal
from ..runs.removal import Removal
from ..runs.state import RunState
from ..runs.store import RunStore
from ..spec.job_spec import JobSpec
from ..spec.sweep import SweepSpec, params_text
from ..submit.runner import submit_array
from ..targets.lookup import get_target
from . import metric, search, store
from .ranking import STOPPED_EARLY, best_first
from .store import SweepRecord, Trial, TrialRow
from .trials import base_job, checked_trials, marked, trial_job


def start(job: JobSpec, spec: SweepSpec, target: str = "local", **options: Any) -> Sweep:
    """Check every trial, record the sweep, and start its detached driver; nothing is submitted when a trial
    is invalid (JobError, exit 2). Random search gets a seed here unless the spec names one."""
    spec = spec.seeded(secrets.randbelow(2**31))
    if spec.chosen_strategy == "bayesian":  # the engine searches (search.py): one request, no driver
        return Sweep(*search.start(job, spec, target, **options))
    parsed = get_target(target).parse_options(**options)
    trials = checked_trials(job, spec, target, parsed)
    base = base_job(job)
    record = SweepRecord(
        native_id=store.new_id(job.name),
        job_name=job.name,
        target=target,
        options=options,
        spec=spec,
        job=base.to_dict(),
        base_dir=str(job.base_dir) if job.base_dir else None,
    )
    where = store.create(record, trials)
    try:
        runs = submit_array(
            [marked(trial_job(base, t.params, t.index), target, record.id, t.index) for t in trials],
            target, spec.parallel, record.native_id, record.id,
            **options,
        )  # fmt: skip
    except BaseException:
        shutil.rmtree(where, ignore_errors=True)  # nothing was submitted: no sweep to show
        raise
    seed = f", seed {spec.seed}" if spec.random else ""
    store.say(where, f"sweep of {len(trials)} trials on {target}, {spec.parallel} at once{seed}")
    if runs is not None:  # one engine job runs them all; the driver only watches (and stops trials early)
        for trial, run in zip(trials, runs, strict=True):
            trial.run_id = run.id
            store.say(where, f"trial {trial.index} ({params_text(trial.params)}) submitted as {run.id}")
        store.save_trials(where, trials)
        engine_id = runs[0].native_id.split("_")[0] if runs else None
        record = record.model_copy(update={"engine_id": engine_id})
        store.write_json(where / "sweep.json", record.model_dump(mode="json"))
    sweep = Sweep(record, where)
    sweep.start_driver()
    return sweep


class Sweep:
    """A recorded sweep: its definition (`record`), its folder, and what acts on all its trials."""

    def __init__(self, record: SweepRecord, where: Path) -> None:
        self.record = record
        self.folder = where

    @classmethod
    def from_id(cls, sweep_id: str) -> Sweep:
        record, _ = store.load(sweep_id)
        return cls(record, store.folder(sweep_id))

    @property
    def id(self) -> str:
        return self.record.id

    def trials(self) -> list[Trial]:
        return store.load_trials(self.folder)

    def start_driver(self) -> None:
        from ..targets.processes import start_detached

        try:
            start_detached("trainctl.sweeps.driver", self.folder)
        except OSError as exc:
            raise EngineError(f"could not start the sweep driver: {exc}") from None

    def driver_alive(self) -> bool:
        return store.driver_running(self.folder)

    @property
    def finished(self) -> bool:
        return (self.folder / "done").exists() or (self.folder / "cancel").exists()

    def removals(self) -> list[Removal]:
        """`trainctl rm sweep:<id>`: every trial's removal (runs/removal.py), once the sweep has ended; else a
        UsageError, and nothing is removed."""
        if not self.finished or self.driver_alive():
            raise UsageError([f"{self.id} has not ended: cancel it first (`trainctl cancel {self.id}`)"])
        runs = RunStore()
        records = [r for t in self.trials() if t.run_id and (r := runs.get_record(t.run_id)) is not None]
        return run_removal.checked(records, sweeps=True)

    def remove(self, removals: list[Removal]) -> None:
        """The trials (`removals`), then the sweep's own folder."""
        for removal in removals:
            run_removal.remove(removal, RunStore())
        shutil.rmtree(self.folder)

    def recover(self) -> str | None:
        """Start the driver again when it is gone while trials are still to run; the line to say, if so. A search
        the engine runs has no driver: this notes whether it has ended."""
        if self.record.search is not None:
            if not self.finished:
                search.refresh(self.record, self.folder)
            return None
        if self.finished or self.driver_alive():
            return None
        started = _read(self.folder / "driver.json")
        if not started and time.time() - self.record.created_at < 30:
            return None  # just started: its driver has not written driver.json yet
        self.start_driver()
        store.say(self.folder, "the driver was not running; `sweep status` started it again")
        return "the sweep's driver was not running; started it again"

    def rows(self, refresh: bool = True) -> list[TrialRow]:
        """The trials, best first (by the sweep's metric and mode), then those without a value yet."""
        if self.record.search is not None:
            return best_first(search.rows(self.record, self.folder), self.record.spec.mode)
        trials = self.trials()
        recorded = {r.id: r for r in RunStore().list(target=self.record.target) if r.run.sweep_id == self.id}
        states = {run_id: r.state for run_id, r in recorded.items()}
        # from the one list above, not a read per trial (1,000 reads: 3 s; docs/scale.md)
        runs = {t.index: Run.of(recorded[t.run_id].run) if t.run_id in recorded else Run.from_id(t.run_id)
                for t in trials if t.run_id}  # fmt: skip
        if refresh:
            unfinished = [r for r in runs.values() if r.id not in states or not states[r.id].finished]
            with contextlib.suppress(TrainctlError):
                read = get_target(self.record.target).status_many(unfinished)
                RunStore().save_statuses(read)
                states.update({run_id: status.state for run_id, status in read.items()})
        spec = self.record.spec
        # a queued trial has written no metric yet: reading 1,000 queued trials' files cost 6 s; the others'
        # are read together, not a call to the engine each (64 running trials: 128 subprocesses; docs/scale.md)
        started = [r for r in runs.values() if states.get(r.id) is not RunState.QUEUED]
        points = metric.points_many(started, spec.metric)
        out, curves = [], {}
        for trial in trials:
            run = runs.get(trial.index)
            never = "cancelled" if (self.folder / "cancel").exists() else "pending"
            state = states.get(run.id, RunState.UNKNOWN).value if run else never
            found = curves[trial.index] = points.get(run.id, []) if run else []
            summary = _summary(run) if run and state == RunState.SUCCEEDED.value else None
            note = trial.stopped_early or trial.error
            if trial.stopped_early:
                state = STOPPED_EARLY
            elif trial.error:
                state = "not submitted"
            out.append(
                TrialRow(
                    index=trial.index,
                    params=trial.params,
                    run_id=trial.run_id,
                    state=state,
                    metric=metric.final(found, summary, spec.metric),
                    step=found[-1][0] if found else None,
                    note=note,
                )
            )
        return best_first(out, spec.mode, curves)

    def cancel(self, grace_s: float = 30.0) -> list[str]:
        """Submit no more, stop the driver, cancel every trial that has not ended; the lines of what survived."""
        if self.record.search is not None:
            return search.cancel(self.record, self.folder)
        (self.folder / "cancel").touch()
        found = _read(self.folder / "driver.json")
        if found and self.driver_alive():
            with contextlib.suppress(ProcessLookupError):
                os.kill(int(found["pid"]), signal.SIGTERM)
            deadline = time.monotonic() + grace_s
            while self.driver_alive() and time.monotonic() < deadline:
                time.sleep(0.2)
        store.say(self.folder, "cancelled: every trial that has not ended is stopped")
        from .driver import adopt

        trials = self.trials()
        if adopt(self.record, trials):
            store.save_trials(self.folder, trials)
        problems = []
        for trial in trials:
            if trial.run_id is None:
                continue
            run = Run.from_id(trial.run_id)
            try:
                if not run.status().state.finished:
                    run.cancel()
                    run.status()
            except TrainctlError as exc:
                problems.append(f"{run.id}: {exc}")
        return problems

    def wait(self, timeout: float | None = None, poll: float = 2.0) -> list[TrialRow]:
        """Block until every trial has ended (the driver says so); the rows, best first."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while not self.finished:
            if deadline is not None and time.monotonic() >= deadline:
                raise EngineError(f"{self.id} still running after {timeout:g}s")
            self.recover()
            time.sleep(poll)
        return self.rows()

    def __repr__(self) -> str:
        return f"Sweep(id={self.id!r}, job={self.record.job_name!r}, target={self.record.target!r})"


def _read(path: Path) -> Any:
    import json

    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def _summary(run: Run) -> dict[str, Any] | None:
    with contextlib.suppress(TrainctlError, OSError):
        return run.summary()
    return None

"""A sweep its engine searches itself: `strategy: bayesian`, one SageMaker HyperParameterTuningJob.

SageMaker picks every trial's values (Bayesian optimisation over the ranges) and runs at most `parallel`
training jobs at once, so there is no driver: the sweep's folder records the tuning job, `sweep status` lists
its training jobs (the target's `search_engine().trials`), and `cancel` stops the tuning job. Every value a
range can take at its ends (a grid's or choice()'s every value) is checked first by the one preflight
(`preflight.check`), as each trial of a grid or random sweep is.
"""

from __future__ import annotations

from pathlib import Path
from types import ModuleType
from typing import Any

from ..errors import JobError, TrainctlError
from ..runs.state import RunRef
from ..runs.store import RunStore
from ..spec.job_spec import JobSpec
from ..spec.sweep import SweepSpec
from ..submit.preflight import check
from ..targets.base import Rendered
from ..targets.lookup import get_target
from . import store
from .store import SweepRecord, TrialRow
from .trials import base_job, refuse_shared_folders


def engine_of(target: str) -> ModuleType:
    """The target's search engine; exit 2 (JobError) where it has none, naming where bayesian exists."""
    found = get_target(target).search_engine()
    if found is None:
        raise JobError(
            [f"sweep.strategy: bayesian runs as a SageMaker HyperParameterTuningJob (--target sagemaker); the {target} "
             "target has no search of its own: use grid or random there"], "sweep"
        )  # fmt: skip
    return found


def _prepared(job: JobSpec, target: str, options: dict[str, Any]) -> tuple[ModuleType, JobSpec, Any, Any]:
    engine = engine_of(target)
    refuse_shared_folders(job)
    parsed = get_target(target).parse_options(**options)
    return engine, base_job(job), parsed, lambda trial: check(trial, target, parsed)


def render(job: JobSpec, spec: SweepSpec, target: str, **options: Any) -> Rendered:
    """The one request the sweep would send (`trainctl sweep --dry-run`); every value checked, nothing sent."""
    engine, base, parsed, checked = _prepared(job, target, options)
    rendered: Rendered = engine.render(base, spec, checked, parsed)
    return rendered


def start(job: JobSpec, spec: SweepSpec, target: str, **options: Any) -> tuple[SweepRecord, Path]:
    """Check, submit the search, then record the sweep; nothing is recorded when the engine refuses it."""
    engine, base, parsed, checked = _prepared(job, target, options)
    search = engine.submit(base, spec, checked, parsed)
    record = SweepRecord(
        native_id=store.new_id(job.name),
        job_name=job.name,
        target=target,
        options={k: v for k, v in options.items() if k != "boto_session"},
        spec=spec,
        job=base.to_dict(),
        base_dir=str(job.base_dir) if job.base_dir else None,
        engine_id=search["name"],
        search=search,
    )
    where = store.create(record, [])
    store.say(where, f"{engine.__name__.rsplit('.', 1)[-1]}: {search['name']} searches {spec.size} trials, "
              f"{spec.parallel} at once, seed {spec.seed}")  # fmt: skip
    return record, where


def refresh(record: SweepRecord, where: Path) -> None:
    """Write `done` once the engine says the search has ended."""
    assert record.search is not None
    if not (where / "done").exists() and engine_of(record.target).finished(record.search):
        store.say(where, f"{record.search['name']} has ended")
        (where / "done").touch()


def rows(record: SweepRecord, where: Path) -> list[TrialRow]:
    """The search's training jobs, in the order SageMaker started them (the caller sorts them best first), each
    recorded as a run of the sweep the first time it is seen (`trainctl list`, `status`, `logs` take it)."""
    assert record.search is not None
    found = engine_of(record.target).trials(record.search, record.job_name)
    runs = RunStore()
    out = []
    for index, trial in enumerate(found):
        ref: RunRef = trial.pop("ref")
        if runs.get(ref.id) is None:
            runs.record(ref.model_copy(update={"sweep_id": record.id}), trial["state"])
        else:
            runs.update_state(ref.id, trial["state"])
        out.append(TrialRow(index=index, step=None, **trial))
    return out


def cancel(record: SweepRecord, where: Path) -> list[str]:
    """Stop the search (and with it every training job still running); the problems, if any."""
    assert record.search is not None
    (where / "cancel").touch()
    try:
        engine_of(record.target).stop(record.search)
    except TrainctlError as exc:
        return [f"{record.search['name']}: {exc}"]
    store.say(where, f"cancelled: {record.search['name']} stopped")
    return []

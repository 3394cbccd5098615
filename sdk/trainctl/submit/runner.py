"""What runs a job: prepare its code bundle, submit it on a target, record the run (render, pure, is
targets/lookup.py's, so it loads none of this).

Above the spec and the targets: it is the one place that joins them (the targets take a `JobSpec`
and return a `RunRef`; this returns the `Run` handle and keeps the run store current).
"""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..errors import EngineError
from ..run import Run
from ..runs.identity import RunIdentity
from ..runs.provenance import provenance
from ..runs.state import Lineage, RunRef
from ..runs.store import RunStore
from ..spec.job_spec import JobSpec
from ..targets.base import Target
from ..targets.lookup import get_target
from ..targets.registry import canonical
from . import preflight, trackers
from .bundle import prepare, prepared_if_present

if TYPE_CHECKING:
    from .resume import Source


def submit(
    job: JobSpec,
    target: str = "local",
    resume_from: Run | str | None = None,
    sweep_id: str | None = None,
    **options: Any,
) -> Run:
    """Check the options and what the target needs, submit, and record the run in the run store (with the
    sweep it is a trial of, if any).

    With `resume_from` (a run or its id, or an `s3://bucket/prefix` of checkpoints): its newest checkpoint
    that verifies is copied to this target's checkpoint location first (submit/resume.py), and the new run
    records where it came from.
    """
    target = canonical(target)
    chosen = get_target(target)
    parsed = chosen.parse_options(**options)
    job = preflight.check(job, target, parsed)
    prefix = resume_from if isinstance(resume_from, str) and resume_from.startswith("s3://") else None
    source = None if resume_from is None or prefix else _recorded(resume_from)
    fetched = _from_prefix(prefix, job) if prefix else None  # a ResumeError: nothing is submitted
    resumes = source.run_uid if source else fetched.info.get("run_uid") if fetched else None
    job = job.with_identity(RunIdentity.new(resumes, resuming=source is not None or fetched is not None))
    tracker = trackers.start(job, source, sweep_id) if chosen.creates_run(parsed) else None
    if tracker is not None:  # its ids go into every process's environment (tracking_spec.tracker_env)
        job = job.with_tracker_run(tracker)
    came_from = None
    try:
        if fetched is not None:
            ref, came_from = _placed(job, chosen, parsed, fetched)
        elif source is None:
            ref = chosen.schedule(job, parsed)
        else:
            ref, came_from = _resumed(job, chosen, parsed, source)
    except BaseException:
        if fetched is not None:
            _unstage(fetched)
        if tracker is not None and source is None and job.tracking is not None and job.tracking.mlflow is not None:
            trackers.abandon(job.tracking.mlflow.tracking_uri, tracker.run_id)  # created for a run never queued
        raise
    update = {
        **_output_s3(job, ref, target), "resumed_from": came_from, "sweep_id": sweep_id,
        "provenance": ref.provenance or _provenance(job),
        "run_uid": ref.run_uid,  # the engine's word: `k8s apply` runs without one (the object is the run)
        "tracker_run_id": tracker.run_id if tracker else None, "tracker_uri": _tracker_uri(job),
    }  # fmt: skip
    run = Run.of(ref.model_copy(update=update))
    if chosen.creates_run(parsed):  # a dry run left nothing on the engine: nothing to record
        RunStore().record(run)
        try:
            trackers.describe(job, run, run.provenance, came_from)
        except EngineError as exc:  # the run is queued: say so, and what the tracker lacks
            warnings.warn(f"{run.id} is submitted, but its tracker run lacks params and tags: {exc}", stacklevel=2)
    waits = chosen.waits(parsed)
    if waits is not None:  # recorded first: while it waits the run lists, and a timed-out wait leaves it known
        run.wait(timeout=waits[0], poll=waits[1])
    return run


def _output_s3(job: JobSpec, ref: RunRef, target: str) -> dict[str, Any]:
    """The run's paths with where its output is uploaded (`output_dir: s3://...`, `<prefix>/<run uid>/`); on
    SageMaker the service's own upload (OutputDataConfig) is the run's output, and its handle says where."""
    from ..targets.program import s3_output_dest

    dest = s3_output_dest(job) if target != "sagemaker" else None
    return {"paths": ref.paths.model_copy(update={"output_s3": dest})} if dest else {}


def _recorded(resume_from: Run | str) -> RunRef:
    from . import resume

    return resume.recorded(resume_from if isinstance(resume_from, str) else resume_from.id)


def _tracker_uri(job: JobSpec) -> str | None:
    """Where the status refresh finds the MLflow run (trackers.settle); None without one."""
    mlflow = job.tracking.mlflow if job.tracking is not None else None
    return mlflow.tracking_uri if mlflow is not None and job.tracker_run is not None else None


def submit_array(
    jobs: list[JobSpec], target: str, parallel: int, tag: str, sweep_id: str, **options: Any
) -> list[Run] | None:
    """A sweep's trials as one engine job where the target has one (`SchedulesArrays`: a SLURM array),
    each trial recorded as a run of the sweep; None where it has not (the sweep driver submits them). The
    caller has checked every trial with `preflight.check` first (sweeps/trials.py checked_trials)."""
    from ..targets.engine_contract import SchedulesArrays

    chosen = get_target(target)
    if not isinstance(chosen, SchedulesArrays):  # no arrays on this engine: the driver submits
        return None
    parsed = chosen.parse_options(**options)
    dry = not chosen.creates_run(parsed)
    tracked = [None if dry else trackers.start(job, None, sweep_id) for job in jobs]  # one tracker run per trial
    jobs = [job.with_identity(RunIdentity.new()) for job in jobs]
    jobs = [prepare(job.with_tracker_run(t) if t else job) for job, t in zip(jobs, tracked, strict=True)]
    try:
        refs = chosen.schedule_array(jobs, parsed, parallel, tag)
    except BaseException:
        for job, tracker in zip(jobs, tracked, strict=True):
            if tracker is not None and job.tracking is not None and job.tracking.mlflow is not None:
                trackers.abandon(job.tracking.mlflow.tracking_uri, tracker.run_id)
        raise
    if refs is None:
        return None
    runs = []
    for job, ref, tracker in zip(jobs, refs, tracked, strict=True):
        update = {**_output_s3(job, ref, target), "provenance": ref.provenance or _provenance(job), "sweep_id": sweep_id,
                  "tracker_run_id": tracker.run_id if tracker else None, "tracker_uri": _tracker_uri(job)}  # fmt: skip
        run = Run.of(ref.model_copy(update=update))
        RunStore().record(run)
        if tracker is not None:
            try:
                trackers.describe(job, run, run.provenance, None)
            except EngineError as exc:
                warnings.warn(f"{run.id} is submitted, but its tracker run lacks params and tags: {exc}", stacklevel=2)
        runs.append(run)
    return runs


def _resumed(job: JobSpec, chosen: Target[Any], parsed: Any, found: RunRef) -> tuple[RunRef, Lineage]:
    """Schedule the job continuing the recorded run `found` (submit/resume.py); (the run, its lineage)."""
    from . import resume

    job = resume.prepare(job)
    continued = chosen.schedule_continuing(job, parsed, found)
    if continued is not None:
        return continued[0], resume.lineage_in_place(found, continued[1], continued[0])

    def fetch(run: RunRef, dest: Path, accept: resume.Accept | None) -> resume.Fetched:
        return get_target(run.target).fetch_checkpoints(run, dest, accept)

    here = get_target(found.target).checkpoints_here(found)
    return _placed(job, chosen, parsed, resume.source_of(found, job, fetch, here=here))


def _from_prefix(uri: str, job: JobSpec) -> Source:
    from . import resume

    return resume.from_prefix(uri, resume.prepare(job))


def _unstage(source: Source) -> None:
    from . import resume

    resume.unstage(source)


def _placed(job: JobSpec, chosen: Target[Any], parsed: Any, source: Source) -> tuple[RunRef, Lineage]:
    """Schedule the job with the checkpoint `source` (a resume.Source) where its `checkpoint.resume: auto` finds it."""
    from . import resume

    job = resume.prepare(job)
    try:
        ref, placed = chosen.schedule_resumed(job, parsed, source.files, source.subdir)
    finally:
        resume.unstage(source)  # a fetched copy: placed (or refused), no longer needed
    return ref, resume.lineage(source, placed)


def _provenance(job: JobSpec) -> Any:
    """Image, code sha256, spec sha256 and version, recorded with the run (`trainctl status` shows them)."""
    code = prepared_if_present(job)
    return provenance(job, code.sha256 if code else None, function=job.function)

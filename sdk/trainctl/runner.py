"""What runs a job: pick the target from the table, render or submit, record the run.

Above the spec and the targets: it is the one place that joins them (the targets take a `JobSpec`
and return a `RunRef`; this returns the `Run` handle and keeps the run store current).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from .run import Run
from .run_state import RunRef
from .run_store import RunStore
from .spec import JobSpec
from .targets.base import Rendered, Target
from .targets.lookup import get_target


def render(job: JobSpec, target: str = "local") -> Rendered:
    """The target's exact artifact for the job (pure)."""
    return get_target(target).render(job)


def submit(job: JobSpec, target: str = "local", resume_from: Run | str | None = None, **options: Any) -> Run:
    """Check the options and what the target needs, submit, and record the run in the run store.

    With `resume_from` (a run or its id): its newest checkpoint that verifies is copied to this
    target's checkpoint location first (resume.py), and the new run records where it came from.
    """
    chosen = get_target(target)
    parsed = chosen.parse_options(**options)
    job.check_target(target)
    came_from = None
    if resume_from is None:
        ref = chosen.schedule(job, parsed)
    else:
        ref, came_from = _resumed(job, chosen, parsed, resume_from if isinstance(resume_from, str) else resume_from.id)
    run = Run.of(ref)
    run.meta.setdefault("provenance", _provenance(job))
    if came_from is not None:
        run.meta["resumed_from"] = came_from
    RunStore().record(run)
    return run


def _resumed(job: JobSpec, chosen: Target[Any], parsed: Any, source_id: str) -> tuple[RunRef, dict[str, Any]]:
    """Schedule the job continuing the recorded run `source_id` (resume.py); (the run, its lineage)."""
    from . import resume

    found = resume.recorded(source_id)
    job = resume.prepare(job, chosen.name)
    continued = chosen.schedule_continuing(job, parsed, found)
    if continued is not None:
        return continued[0], resume.lineage_in_place(found, continued[1], continued[0])

    def fetch(run: RunRef, dest: Path, accept: resume.Accept | None) -> resume.Fetched:
        return get_target(run.target).fetch_checkpoints(run, dest, accept)

    source = resume.source_of(found, job, fetch)
    try:
        ref, placed = chosen.schedule_resumed(job, parsed, source.files, source.subdir)
    finally:
        resume.unstage(source)  # a fetched copy: placed (or refused), no longer needed
    return ref, resume.lineage(source, placed)


def _provenance(job: JobSpec) -> dict[str, Any]:
    """Image, code sha256, spec sha256 and version, recorded with the run (`trainctl status` shows them)."""
    from .bundle import bundle_for
    from .provenance import provenance

    code = bundle_for(job)
    return provenance(job, code.sha256 if code else None)

"""Everything `submit` checks before it asks an engine: one function, so `validate` cannot drift from it.

`trainctl validate`, `Job.check` and `Job.submit` all call `check`: the target's required section fields,
the `code:` folder (it must be here and pack), the command's script (in the code folder; on the local
target, where the run reads it), the target's own inputs (the local target's data and secret files) and
the render itself. Only the engine's answer is left to submit.
"""

from __future__ import annotations

import posixpath
from typing import TypeVar

from .bundle import prepare, prepared
from .errors import JobError, TrainctlError, did_you_mean
from .registry import canonical
from .spec import JobSpec
from .targets.base import SubmitOptions
from .targets.lookup import get_target
from .targets.program import script_index

J = TypeVar("J", bound=JobSpec)


def check(job: J, target: str = "local", options: SubmitOptions | None = None) -> J:
    """The job prepared for `target` (its code bundle packed), or a JobError listing every problem that
    `submit` with these options (parsed; default: none given) would refuse it for without asking the engine."""
    target = canonical(target)
    chosen = get_target(target)
    parsed = options if options is not None else chosen.parse_options()
    problems = list(job.section(target).required_for_submit())
    job = prepare(job)
    try:
        bundle = prepared(job)
    except JobError as exc:  # the code folder is not here
        problems += exc.problems
        bundle = None
    if bundle is not None:
        problems += _script_in_bundle(job, {name for name, _ in bundle.files}, str(bundle.source))
    if not problems:
        problems += chosen.check_inputs(job, parsed)
    if problems:
        raise JobError(problems)
    try:
        chosen.render_for(job, parsed)
    except JobError:
        raise
    except TrainctlError as exc:
        raise JobError([str(exc)]) from None
    return job


def advice(job: JobSpec, target: str = "local") -> list[str]:
    """What would run but likely not as meant (warnings, not refusals): GPUs no process uses, a launcher
    under a launcher (launching.py), and the target's own (`Target.advice`: the local machine's GPUs).
    `validate`, `render` and `submit` print them; `Job.check` returns them."""
    from .launching import launch_advice

    return launch_advice(job) + get_target(canonical(target)).advice(job)


def _script_in_bundle(job: JobSpec, files: set[str], folder: str) -> list[str]:
    """A `command:` whose script (`python train.py`, `./run.sh`) is missing from the code folder it runs from."""
    if job.command is None:
        return []
    at = script_index(job.command)
    if at is None:
        return []
    word = posixpath.normpath(job.command[at])
    if word in files:
        return []
    hint = did_you_mean(word, sorted(files))
    return [f"command[{at}]: {job.command[at]!r} is not in the code folder {folder!r}{hint}"]

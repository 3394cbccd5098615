"""`--resume-from RUN`: continue a recorded run on any target from its newest checkpoint that verifies.

Above the spec and the targets, beside submit/runner.py, and naming no target: the source run's target says
whether its checkpoints are on this machine (`Target.checkpoints_here`: a local run's, a SLURM run's
without `slurm.login`); when they are elsewhere (a SageMaker run's S3 prefix, a SLURM run behind
`slurm.login`) its `fetch_checkpoints` copies the newest step-* folders, one at a time, into
`state_dir()/resume/<run>/` until one verifies. The trainer's
own check picks the checkpoint (`python -m trainer.verify DIR --model M`, run with the local target's interpreter: the
SDK never imports the trainer); the target's `place_checkpoint` copies it to where the new run's
`checkpoint.resume: auto` finds it. A `command` job's checkpoint folder is copied whole, as opaque
files. `--resume-from s3://bucket/prefix` names a checkpoint prefix instead of a run (what `checkpoint.dir:
s3://...` mirrors from any target, a SageMaker run's checkpoint prefix): fetched the same way
(targets/s3_checkpoints.py). Every refusal is a ResumeError (exit 2) that says what to do instead.
"""

from __future__ import annotations

import contextlib
import json
import re
import secrets
import shutil
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..runs.state import Lineage, RunRef
from ..runs.store import RunStore, UnknownRunError, state_dir
from ..spec.job_spec import JobSpec
from ..targets.transfer import STEP_DIR, Accept, Fetched, ResumeError, fetch_folder, fetch_newest, newest_steps

__all__ = ["STEP_DIR", "Accept", "Fetched", "ResumeError", "fetch_folder", "fetch_newest", "newest_steps"]


@dataclass(frozen=True)
class Source:
    """The checkpoint to copy: `files` (a step-* folder, or a command job's whole folder) and what it is."""

    run_id: str
    target: str
    files: Path
    subdir: str
    """Where under the new run's checkpoint location it goes ("" for a command job's folder)."""
    info: dict[str, Any]
    origin: str = ""
    """Where a fetched checkpoint came from (an S3 URI, host:path); "" when it was on this machine."""
    staged: Path | None = None
    """The folder a fetched checkpoint was copied into (`unstage` removes it once placed)."""


Fetch = Callable[[RunRef, Path, Accept | None], Fetched]
"""The source run's target's `fetch_checkpoints` (submit/runner.py passes it: this module imports no target)."""


def recorded(run_id: str) -> RunRef:
    """The recorded run, or UnknownRunError (exit 2)."""
    found = RunStore().get(run_id)
    if found is None:
        raise UnknownRunError(f"--resume-from {run_id}: no such run in the run store ({RunStore().path})")
    return found


def source_of(found: RunRef, job: JobSpec, fetch: Fetch | None = None, here: Path | None = None) -> Source:
    """The newest usable checkpoint of the recorded run, or a ResumeError saying why there is none. `here`:
    its checkpoint folder on this machine (its target's `checkpoints_here`); None: `fetch` copies them here."""
    run_id = found.id
    if here is None:
        if fetch is None:
            raise ResumeError(
                f"--resume-from {run_id}: the checkpoints of a {found.target} run are not on this machine"
            )
        return _fetched(found.id, found.target, job, lambda dest, accept: fetch(found, dest, accept))
    path = here
    if not path.is_dir():
        raise ResumeError(f"--resume-from {run_id}: its checkpoint folder {path} does not exist (deleted?)")
    if job.trainer is None:
        if not any(path.iterdir()):
            raise ResumeError(f"--resume-from {run_id}: its checkpoint folder {path} is empty")
        return Source(run_id, found.target, path, "", {"path": str(path), "opaque": True})
    info = verify(path, job, _python(job))
    chosen = Path(str(info["path"]))
    return Source(run_id, found.target, chosen, chosen.name, info)


def staging(run_id: str) -> Path:
    """A new empty folder for one fetch of `run_id`'s checkpoints: `state_dir()/resume/<run id>/<token>/`
    (a token per submit, so two resumes of one run at once do not share it)."""
    folder = state_dir() / "resume" / re.sub(r"[^A-Za-z0-9._-]", "_", run_id) / secrets.token_hex(4)
    folder.mkdir(parents=True)
    return folder


def unstage(source: Source) -> None:
    """Remove a fetched copy once placed (or refused): its token folder, and the run's folder when empty."""
    if source.staged is not None:
        shutil.rmtree(source.staged, ignore_errors=True)
        with contextlib.suppress(OSError):  # not empty: another fetch of the same run is under way
            source.staged.parent.rmdir()


def from_prefix(uri: str, job: JobSpec) -> Source:
    """`--resume-from s3://bucket/prefix`: its newest step-* folder that verifies (a command job: every file)."""
    from ..targets import s3_checkpoints

    return _fetched(uri, "s3", job, lambda dest, accept: s3_checkpoints.fetch(uri, dest, accept))


def _fetched(run_id: str, target: str, job: JobSpec, fetch: Callable[[Path, Accept | None], Fetched]) -> Source:
    """Copy the checkpoints here (newest step-* first, until one verifies), then as a local one."""
    dest = staging(run_id)
    try:
        return _fetch_into(dest, run_id, target, job, fetch)
    except BaseException:
        unstage(Source(run_id, target, dest, "", {}, staged=dest))
        raise


def _fetch_into(
    dest: Path, run_id: str, target: str, job: JobSpec, fetch: Callable[[Path, Accept | None], Fetched]
) -> Source:
    if job.trainer is None:
        got = fetch(dest, None)
        if not any(got.path.iterdir()):
            raise ResumeError(f"--resume-from {run_id}: its checkpoint folder {got.origin} is empty")
        info = {"path": got.origin, "opaque": True}
        return Source(run_id, target, got.path, "", info, got.origin, dest)
    python = _python(job)
    chosen: dict[str, Any] = {}

    def accept(step: Path) -> bool:
        try:
            chosen.update(verify(step.parent, job, python))  # the only step-* folder there
        except ResumeError as exc:
            if "no checkpoint that verifies" in str(exc):  # corrupt or incomplete: try the next older one
                return False
            raise  # another model: an older checkpoint of the run would be no better
        return True

    got = fetch(dest, accept)
    return Source(run_id, target, got.path, got.path.name, chosen, got.origin, dest)


def _python(job: JobSpec) -> str:
    """The interpreter that has the trainer on this machine: the local target's (local.python), else trainctl's."""
    return getattr(job.section("local"), "python", None) or sys.executable


def verify(root: Path, job: JobSpec, python: str) -> dict[str, Any]:
    """The trainer's choice of checkpoint under `root` (its metadata + `path`, and `changes`: each of the job's
    trainer settings that differs from the checkpoint's), or a ResumeError with its reason (none verifies,
    another model, a change the saved state cannot take: model_args, optimizer, strategy)."""
    from ..targets.program import as_flags, trainer_settings

    assert job.trainer is not None, "only trainer jobs have checkpoints trainctl can read"
    flags = as_flags(trainer_settings(job, data_paths={}, checkpoint_dir=None, output_dir=None))
    argv = [python, "-m", "trainer.verify", str(root), "--model", job.trainer.model, "--", *flags]
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=600, check=False)
    except OSError as exc:
        raise ResumeError(
            f"cannot run {python} -m trainer.verify: {exc}; set local.python to one with the trainer"
        ) from None
    if done.returncode != 0:
        reason = done.stderr.strip().splitlines()[-1] if done.stderr.strip() else f"exit {done.returncode}"
        raise ResumeError(f"--resume-from: {reason.removeprefix('error: ')}")
    info: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return info


def prepare(job: JobSpec) -> JobSpec:
    """The job as the resumed run submits it: checkpoint.resume auto (the copied checkpoint is the newest)."""
    ckpt = job.checkpoint
    if ckpt.resume == "never":
        raise ResumeError(
            "checkpoint.resume: got 'never' with --resume-from; set it to 'auto' (the copied checkpoint is the newest)"
        )
    return job.model_copy(update={"checkpoint": ckpt.model_copy(update={"resume": "auto"})})


def lineage(source: Source, placed: str) -> Lineage:
    """What the new run records about where it came from (`trainctl status` shows it)."""
    keep = ("step", "samples", "epoch", "world_size", "model", "changes")
    return Lineage.model_validate(
        {
            "run": source.run_id,
            "target": source.target,
            "checkpoint": source.origin or str(source.files),
            "copied_to": placed,
            **{k: source.info[k] for k in keep if k in source.info},
        }
    )


def lineage_in_place(found: RunRef, origin: str, run: RunRef) -> Lineage:
    """The lineage of a run that copies the source's checkpoints itself (Target.schedule_continuing): the
    trainer, not trainctl, picks the checkpoint there, and its log names the step and the changed settings."""
    return Lineage(
        run=found.id,
        target=found.target,
        checkpoint=origin,
        copied_to=run.paths.checkpoint_dir or "",
        by="the new run's own processes, before the trainer starts (it picks the newest that verifies)",
    )

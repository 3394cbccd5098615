"""`--resume-from RUN`: continue a recorded run on any target from its newest checkpoint that verifies.

Above the spec and the targets, beside runner.py: the run store says where RUN's checkpoints live
(`meta.checkpoint_dir`, recorded by the local and SLURM engines); the trainer's own check picks the
checkpoint (`python -m trainer.verify DIR --model M`, run with the local target's interpreter: the
SDK never imports the trainer); the target's `place_checkpoint` copies it to where the new run's
`checkpoint.resume: auto` finds it. A `command` job's checkpoint folder is copied whole, as opaque
files. Every refusal is a ResumeError (exit 2) that says what to do instead.
"""

from __future__ import annotations

import json
import secrets
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .errors import TrainctlError
from .run_store import RunStore, UnknownRunError, state_dir
from .spec import JobSpec


class ResumeError(TrainctlError):
    """`--resume-from` cannot be honoured: nothing was submitted. Exit code 2."""

    exit_code = 2


@dataclass(frozen=True)
class Source:
    """The checkpoint to copy: `files` (a step-* folder, or a command job's whole folder) and what it is."""

    run_id: str
    target: str
    files: Path
    subdir: str
    """Where under the new run's checkpoint location it goes ("" for a command job's folder)."""
    info: dict[str, Any]


def source_of(run_id: str, job: JobSpec) -> Source:
    """The newest usable checkpoint of the recorded run, or a ResumeError saying why there is none."""
    found = RunStore().get(run_id)
    if found is None:
        raise UnknownRunError(f"--resume-from {run_id}: no such run in the run store ({RunStore().path})")
    root = found.meta.get("checkpoint_dir")
    if not root:
        raise ResumeError(
            f"--resume-from {run_id}: the checkpoints of a {found.target} run are not reachable from here "
            "(only local and SLURM runs record a checkpoint folder on this machine); copy them into a "
            "local folder and set checkpoint.dir to it (checkpoint.resume: auto takes the newest)"
        )
    if found.meta.get("login"):
        raise ResumeError(
            f"--resume-from {run_id}: its checkpoints are in {root} on {found.meta['login']}, not reachable "
            "from here; copy them to this machine (scp -r) and set checkpoint.dir to that folder"
        )
    path = Path(root)
    if not path.is_dir():
        raise ResumeError(f"--resume-from {run_id}: its checkpoint folder {path} does not exist (deleted?)")
    if job.trainer is None:
        if not any(path.iterdir()):
            raise ResumeError(f"--resume-from {run_id}: its checkpoint folder {path} is empty")
        return Source(run_id, found.target, path, "", {"path": str(path), "opaque": True})
    info = verify(path, job.trainer.model, _python(job))
    chosen = Path(str(info["path"]))
    return Source(run_id, found.target, chosen, chosen.name, info)


def _python(job: JobSpec) -> str:
    """The interpreter the local target runs the trainer with (local.python, else trainctl's own)."""
    try:
        section = job.section("local")
    except Exception:  # a job without a local section: trainctl's interpreter
        section = None
    return getattr(section, "python", None) or sys.executable


def verify(root: Path, model: str, python: str) -> dict[str, Any]:
    """The trainer's choice of checkpoint under `root` (its metadata + `path`), or a ResumeError with its reason."""
    argv = [python, "-m", "trainer.verify", str(root), "--model", model]
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


def prepare(job: JobSpec, target: str) -> JobSpec:
    """The job as the resumed run submits it: checkpoint.resume auto, and on the local target a fresh
    checkpoint folder when none is set (the default one is per run and does not exist before the submit)."""
    ckpt = job.checkpoint
    if ckpt.resume == "never":
        raise ResumeError(
            "checkpoint.resume: got 'never' with --resume-from; set it to 'auto' (the copied checkpoint is the newest)"
        )
    update: dict[str, Any] = {"resume": "auto"}
    if target == "local" and ckpt.dir is None:
        update["dir"] = str(state_dir() / "resumed" / secrets.token_hex(4) / "checkpoints")
    return job.model_copy(update={"checkpoint": ckpt.model_copy(update=update)})


def lineage(source: Source, placed: str) -> dict[str, Any]:
    """What the new run records about where it came from (`trainctl status` shows it)."""
    keep = ("step", "samples", "epoch", "world_size", "model")
    return {
        "run": source.run_id,
        "target": source.target,
        "checkpoint": str(source.files),
        "copied_to": placed,
        **{k: source.info[k] for k in keep if k in source.info},
    }

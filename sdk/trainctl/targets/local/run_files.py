"""A local run's files copied in: the checkpoint `--resume-from` places in a new run's folder before it starts."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from . import container_argv as ctr


def place_in_run(spec: dict[str, Any], files: Path, subdir: str) -> Path:
    """`--resume-from`: `files` into the new run's checkpoint folder (`spec`: its plan), before it starts. Not the
    engine contract's `place_checkpoint` (engine_contract.py), which takes a job: named apart so none mistakes it."""
    placed = copy_checkpoint(files, Path(spec["checkpoint_dir"]), subdir)
    if spec["container"] and os.geteuid() == 0:  # the image's user 10001 reads, and later prunes, it
        uid, gid = (int(x) for x in ctr.TRAINER_USER.split(":"))
        for path in [placed, *placed.rglob("*")]:
            os.chown(path, uid, gid)
    return placed


def copy_checkpoint(files: Path, dest: Path, subdir: str) -> Path:
    """Copy a checkpoint folder under `dest`, refusing a destination that already holds checkpoints
    (the resumed run would take the newest of them, not the one copied)."""
    import shutil

    from ..transfer import ResumeError

    if dest.is_dir() and any(p.name.startswith("step-") or not subdir for p in dest.iterdir()):
        raise ResumeError(
            f"--resume-from: the new run's checkpoint folder {dest} already holds checkpoints; "
            "set checkpoint.dir (or the target's workdir) to an empty folder"
        )
    target = dest / subdir if subdir else dest
    shutil.copytree(files, target, dirs_exist_ok=True)
    return target

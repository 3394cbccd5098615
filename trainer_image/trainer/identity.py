"""This run's uid, as the container sees it, and the two checks that keep a run out of another's files.

Submit gives every run a uid of 128 random bits (the SDK's identity.py) and every process gets it as
`TRAINCTL_RUN_UID`; engine ids (a SLURM job id, an object name) can repeat, the uid cannot. Two checks trust it:

- `claim(run_dir)`: the launcher writes the uid into the run's folder (`run-uid`) the first time, and refuses a
  folder whose marker names another run (a reused job id on a shared filesystem, a copied folder);
- `check_owner(...)`: automatic resume continues only checkpoints this run wrote (`run_uid` in meta.json) when
  they sit in the run's own folder. A run started with `--resume-from` (`TRAINCTL_RESUMES_RUN_UID`: the run it
  continues) had another run's checkpoint placed there on purpose, and that checkpoint may have been written by
  any run of that run's lineage (one resumed from another that crashed before its first save): it is accepted,
  and the log names the run that wrote it. A folder the user named (`checkpoint.dir`) is theirs and shared on
  purpose: no check there.

Both refuse loudly, naming both runs, with exit 2 (never retried); nothing is deleted. Without a uid (a run
started by hand, `trainctl k8s apply`), neither applies. The trainer never imports the SDK: the variable names
are the contract (docs/contracts.md).
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from .errors import TrainerInputError

UID_ENV = "TRAINCTL_RUN_UID"
RESUMES_ENV = "TRAINCTL_RESUMES_RUN_UID"
RUN_DIR_ENV = "TRAINCTL_RUN_DIR"
NO_UID = "none"
MARKER = "run-uid"


def own_uid() -> str | None:
    return os.environ.get(UID_ENV) or None


def claim(run_dir: Path, uid: str) -> bool:
    """Mark `run_dir` as this run's (True: this call wrote the marker), or refuse it: its marker names
    another run. The marker is written whole, then linked into place, so nodes that claim at once agree."""
    marker = run_dir / MARKER
    run_dir.mkdir(parents=True, exist_ok=True)
    # mkstemp, not pid+host: containers of one node share both (pid 1, one hostname), so two srun tasks
    # would write and unlink the same part file.
    fd, name = tempfile.mkstemp(prefix=f".{MARKER}.", dir=run_dir)
    part = Path(name)
    os.fchmod(fd, 0o644)
    with os.fdopen(fd, "w") as out:
        out.write(uid + "\n")
    try:
        os.link(part, marker)
        return True
    except FileExistsError:
        found = marker.read_text().strip()
    finally:
        with contextlib.suppress(OSError):
            part.unlink()
    if found != uid:
        raise TrainerInputError(
            f"run folder {run_dir} belongs to run {found or '(unreadable marker)'}, not to this run {uid}: "
            "its engine id was used again (a SLURM cluster whose job ids restarted, two clusters over one "
            "filesystem, a reused object name) or the folder was copied. Nothing was continued or deleted; "
            "continue that run explicitly with `trainctl submit --resume-from`"
        )
    return False


def claim_from_env(say: Callable[[str], None]) -> None:
    """`claim` the folder `TRAINCTL_RUN_DIR` for the run `TRAINCTL_RUN_UID` (nothing without both)."""
    uid, run_dir = own_uid(), os.environ.get(RUN_DIR_ENV)
    if uid and run_dir and claim(Path(run_dir), uid):
        say(f"run {uid}: its folder {run_dir}")


def _inside(path: Path, folder: Path) -> bool:
    return path.resolve().is_relative_to(folder.resolve())


def check_owner(path: Path, meta: dict[str, Any], root: Path) -> str | None:
    """Refuse to resume automatically from the checkpoint at `path` (under `root`) when another run wrote it
    into this run's own folder; see the module's docstring. Returns what to log when it is another run's
    checkpoint that `--resume-from` placed there."""
    uid, run_dir = own_uid(), os.environ.get(RUN_DIR_ENV)
    if uid is None or not run_dir or not _inside(root, Path(run_dir)):
        return None
    saved = meta.get("run_uid")
    if saved == uid:
        return None
    fetched = path / "fetched-from"  # checkpoint_s3.FETCHED: from the user's checkpoint.dir: s3://..., shared
    if fetched.is_file():
        return f"checkpoint {path} was written by run {saved or '(no uid)'}; fetched from {fetched.read_text().strip()}"
    resumes = os.environ.get(RESUMES_ENV)
    if resumes is not None:
        wrote = saved or "a run with no uid"
        return f"this run ({uid}) continues run {resumes} (--resume-from): checkpoint {path} was written by {wrote}"
    writer = f"run {saved}" if saved else "a run with no uid (an older trainer, or copied by hand)"
    raise TrainerInputError(
        f"checkpoint {path} was written by {writer}, not by this run {uid}, yet it sits in this run's folder "
        f"{run_dir}: automatic resume continues only this run's own checkpoints. Nothing was loaded or deleted; "
        "move it away, or continue that run explicitly with `trainctl submit --resume-from`"
    )

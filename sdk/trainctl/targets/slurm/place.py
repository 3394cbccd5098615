"""`--resume-from` onto SLURM: the job is submitted held (`sbatch --hold`), the checkpoint is copied into its
own run folder `<workdir>/runs/<job id>/checkpoints` (known only once sbatch has answered), then the job is
released (`scontrol release`); if the copy fails, the held job is cancelled. Over the engine's shell, so the
same with `slurm.login` (tar through ssh). I/O; beside engine.py, which is at its size limit.
"""

from __future__ import annotations

import io
import posixpath
import tarfile
from pathlib import Path

from ...errors import EngineError
from ...run_state import RunRef
from ...spec import JobSpec
from .engine import submit, wait_for
from .handle import SlurmHandle
from .podman import PODMAN_USER
from .shell import Shell


def place_into(shell: Shell, dest: str, files: Path, subdir: str, podman: bool) -> str:
    """The folder `files` under `dest` (+ subdir) on the cluster, refused when `dest` already holds files (a
    user-set checkpoint.dir: the resume would take the newest of those)."""
    from ..transfer import ResumeError

    target = posixpath.join(dest, subdir) if subdir else dest
    held = shell.run(["sh", "-c", 'ls -A -- "$1" 2>/dev/null | grep -q .', "sh", dest])
    if held.returncode == 0:
        raise ResumeError(
            f"--resume-from: the new run's checkpoint folder {dest} already holds files; "
            "leave checkpoint.dir unset (each run gets its own) or point it at an empty folder"
        )
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        tar.add(files, arcname=".")
    unpack = 'mkdir -p -- "$1" && tar -x --no-same-owner -C "$1" -f -'
    if podman:  # as root the image's user runs the trainer (render.py): it reads, and later prunes, the copy
        unpack += f' && if [ "$(id -u)" = 0 ]; then chown -R {PODMAN_USER} -- "$1"; fi'
    shell.text(["sh", "-c", unpack, "sh", target], stdin=buf.getvalue(), timeout=600)
    return target


def submit_resumed(
    job: JobSpec, files: Path, subdir: str, wait: bool = False, timeout: float | None = None, poll: float = 2.0
) -> tuple[RunRef, str]:
    """Submit held, place the checkpoint in the run's own folder, release; (the run, where it was placed)."""
    run = submit(job, hold=True)
    shell = Shell.of(run)
    try:
        placed = place_into(
            shell, str(run.paths.checkpoint_dir), files, subdir, SlurmHandle.of(run).container == "podman"
        )
    except BaseException:
        shell.run(["scancel", run.native_id], timeout=30)
        raise
    released = shell.run(["scontrol", "release", run.native_id], timeout=30)
    if released.returncode != 0:
        shell.run(["scancel", run.native_id], timeout=30)
        words = (released.stderr or released.stdout).decode(errors="replace").strip()
        raise EngineError(f"scontrol release {run.native_id} failed: {words}; the held job was cancelled")
    if wait:
        wait_for(run, timeout=timeout, poll=poll)
    return run, placed

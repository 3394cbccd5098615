"""`--resume-from` and `trainctl pull` on SLURM: a run's folder copied between this machine and the cluster, over
the run's own `Shell` (shell.py; the ssh prefix recorded at submit with `slurm.login`), as a tar stream either
way. I/O.

- From a SLURM run (`fetch_checkpoints`; `fetch_output`, the output folder with the final model): `tar -c` on the cluster's side, streamed into Python's tarfile here
  (its "data" filter refuses links and paths that leave the folder).
- Onto SLURM (`submit_resumed`): the job is submitted held (`sbatch --hold`), the checkpoint is copied into its
  own run folder `<workdir>/runs/<job id>/checkpoints` (known only once sbatch has answered), then the job is
  released (`scontrol release`); if the copy fails, the held job is cancelled.
"""

from __future__ import annotations

import io
import posixpath
import shlex
import subprocess
import tarfile
from pathlib import Path
from typing import TYPE_CHECKING

from ...errors import EngineError
from ...runs.state import RunRef
from ...spec.job_spec import JobSpec
from .engine import submit
from .handle import SlurmHandle
from .podman import PODMAN_USER
from .shell import Shell

if TYPE_CHECKING:
    from ..transfer import Accept, Fetched


def _untar(shell: Shell, root: str, name: str, into: Path, timeout: float = 3600.0) -> None:
    """`tar -c -C root name` on the cluster's side, unpacked under `into` as it streams."""
    args = ["tar", "-c", "-C", root, "-f", "-", "--", name]
    into.mkdir(parents=True, exist_ok=True)
    try:
        proc = subprocess.Popen(shell.argv(args), stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    except FileNotFoundError:
        raise EngineError(f"{shell.argv(args)[0]}: command not found (the run's ssh command)") from None
    with proc:
        assert proc.stdout is not None and proc.stderr is not None
        broken = ""
        try:
            with tarfile.open(fileobj=proc.stdout, mode="r|") as tar:
                tar.extractall(into, filter="data")
        except (tarfile.TarError, OSError) as exc:
            broken = str(exc)
            proc.kill()
        err = proc.stderr.read().decode(errors="replace").strip()
        code = proc.wait(timeout=timeout)
    if code != 0 or broken:
        raise EngineError(f"{shlex.join(args)} failed (exit {code}): {err or broken or 'no message'}")


def fetch_checkpoints(run: RunRef, dest: Path, accept: Accept | None = None) -> Fetched:
    """The run's checkpoint folder (paths.checkpoint_dir, on its handle's login host) into `dest`: its step-* folders
    newest first until `accept` takes one (resume.fetch_newest), or, without `accept`, the whole folder."""
    from ..transfer import Fetched, ResumeError, fetch_newest, newest_steps

    root = run.paths.checkpoint_dir
    if not root:
        raise ResumeError(f"--resume-from {run.id}: the run store has no checkpoint folder for it")
    shell, login = Shell.of(run), SlurmHandle.of(run).login
    where = f"{login}:{root}" if login else str(root)
    listed = shell.run(["ls", "-1A", "--", root])
    if listed.returncode != 0:
        why = (listed.stderr or listed.stdout).decode(errors="replace").strip()
        raise ResumeError(f"--resume-from {run.id}: cannot list its checkpoint folder {where}: {why}")
    names = listed.stdout.decode(errors="replace").splitlines()
    if accept is None:
        if not names:
            raise ResumeError(f"--resume-from {run.id}: its checkpoint folder {where} is empty")
        _untar(shell, root, ".", dest)
        return Fetched(dest, where)

    def copy(name: str, folder: Path) -> str:
        _untar(shell, root, name, folder.parent)
        return f"{where.rstrip('/')}/{name}"

    return fetch_newest(newest_steps(names), copy, dest, accept, where)


def fetch_output(run: RunRef, dest: Path) -> Fetched:
    """The run's output folder (paths.output_dir, on its login host) into `dest`."""
    from ..transfer import Fetched

    root = run.paths.output_dir
    if not root:
        raise EngineError(f"{run.id}: the run store has no output folder for it")
    login = SlurmHandle.of(run).login
    _untar(Shell.of(run), root, ".", dest)
    return Fetched(dest, f"{login}:{root}" if login else str(root))


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


def submit_resumed(job: JobSpec, files: Path, subdir: str) -> tuple[RunRef, str]:
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
    return run, placed

"""`--resume-from` a SLURM run behind `slurm.login`: its checkpoint folder copied here over the engine's own
shell (the ssh prefix recorded at submit), the way `engine.place_checkpoint` sends one there, reversed:
`tar -c` on the login host, streamed into Python's tarfile here (its "data" filter refuses links and paths
that leave the folder). I/O; beside engine.py, which is at its size limit.
"""

from __future__ import annotations

import shlex
import subprocess
import tarfile
from pathlib import Path
from typing import TYPE_CHECKING

from ...errors import EngineError
from .handle import SlurmHandle
from .shell import Shell

if TYPE_CHECKING:
    from ...run_state import RunRef
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

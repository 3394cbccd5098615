"""The container engine calls of the local target (podman or docker): create at submit, stop, remove.

Creating the container at submit is the check: a missing runtime, an image that is not on this
machine or a container the runtime cannot create ends the submit with exit 1, the runtime's own
words and what to do, and nothing recorded. The runner then runs `RUNTIME start --attach NAME`.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

from ...errors import EngineError
from . import container_argv as ctr

TIMEOUT_S = 120


def _run(argv: list[str], env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, capture_output=True, text=True, timeout=TIMEOUT_S, env=env)


def require_runtime(runtime: str) -> str:
    found = shutil.which(runtime)
    if not found:
        other = "docker" if runtime == "podman" else "podman"
        raise EngineError(
            f"local.container: {runtime} is not installed (not on PATH)",
            hint=f"install it (Debian: bash scripts/setup-containers.sh) or set local.container: {other}",
        )
    return found


def image_id(runtime: str, image: str) -> str:
    """The local image's id, or exit 1 saying how to get the image here."""
    got = _run([runtime, "image", "inspect", image, "--format", "{{.Id}}"])
    if got.returncode != 0:
        words = (got.stderr or got.stdout).strip()
        raise EngineError(
            f"{runtime}: image {image} is not on this machine: {words}",
            hint=f"build it (bash scripts/image.sh build --flavor cpu) or `{runtime} pull {image}`; nothing was started",
        )
    return got.stdout.strip()


def give_to_trainer(folders: list[str]) -> None:
    """Output and checkpoint folders, created and (as root) given to the image's user 10001."""
    uid, gid = (int(x) for x in ctr.TRAINER_USER.split(":"))
    for folder in folders:
        path = Path(folder)
        created = not path.exists()
        path.mkdir(parents=True, exist_ok=True)
        if os.geteuid() == 0 and (created or path.stat().st_uid == 0):
            os.chown(path, uid, gid)


def create(spec: dict[str, Any], env: dict[str, str]) -> dict[str, Any]:
    """`RUNTIME create ...` from the rendered `run` argv; the container's facts for spec.json."""
    parts = ctr.split_run(spec["argv"])
    runtime, name = parts["runtime"], parts["name"]
    made = _run(parts["create"], env={**os.environ, **env})
    if made.returncode != 0:
        _run([runtime, "rm", "--force", name])
        raise EngineError(
            f"{runtime} could not create the container for this run: {(made.stderr or made.stdout).strip()}",
            hint="fix what the runtime names (image, mounts, options); nothing was started or recorded",
        )
    inspected = _run([runtime, "container", "inspect", name, "--format", "{{.Image}}"])
    return {
        "runtime": runtime,
        "name": name,
        "image": spec["container"]["image"],
        "image_id": inspected.stdout.strip(),
    }


def stop(info: dict[str, Any], signal_name: str = "TERM") -> None:
    """Signal the container's main process (trainer-launch), as `podman kill --signal`."""
    _run([info["runtime"], "kill", "--signal", signal_name, info["name"]])


def remove(info: dict[str, Any]) -> None:
    _run([info["runtime"], "rm", "--force", info["name"]])


def exists(info: dict[str, Any]) -> bool:
    """Whether the runtime still has the run's container (`container inspect` answers for it)."""
    return _run([info["runtime"], "container", "inspect", "--format", "{{.Id}}", info["name"]]).returncode == 0


def start_argv(info: dict[str, Any]) -> list[str]:
    return [info["runtime"], "start", "--attach", info["name"]]

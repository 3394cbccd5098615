"""The job's code bundle, on the node: verify its sha256, unpack it, layer its requirements, then run.

Contract (docs/contracts.md section 1): `TRAINER_CODE_BUNDLE` is the tar.gz (a path), `TRAINER_CODE_SHA256`
the hash the job was rendered with, `TRAINER_CODE_DIR` where it is unpacked (default: the working
directory), `TRAINER_CODE_REQUIREMENTS` a requirements file inside it, `TRAINER_VENV_CACHE` where
venvs are kept by the requirements' hash (shared storage where the target has it). Nothing starts
when the hash differs: the bundle changed after render.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import re
import subprocess
import sys
import tarfile
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

from . import function, untar
from .errors import TrainerInputError

BUNDLE_ENV = "TRAINER_CODE_BUNDLE"
SHA_ENV = "TRAINER_CODE_SHA256"
DIR_ENV = "TRAINER_CODE_DIR"
REQUIREMENTS_ENV = "TRAINER_CODE_REQUIREMENTS"
VENV_CACHE_ENV = "TRAINER_VENV_CACHE"
MARKER = ".trainctl-code.sha256"


@dataclass
class Prepared:
    """Where the code is, and the venv python when requirements were installed."""

    code_dir: Path
    sha256: str
    venv: Path | None = None
    function: str | None = None  # a function job's check (function.py), said in the launcher's log

    @property
    def said(self) -> str:
        return f"; {self.function}" if self.function else ""


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def verify(bundle: Path, expected: str) -> str:
    """The bundle's sha256, or TrainerInputError (exit 2) naming both hashes when it is not the job's."""
    if not bundle.is_file():
        raise TrainerInputError(f"{BUNDLE_ENV}={bundle}: no such file; the code bundle did not arrive")
    if not re.fullmatch(r"[0-9a-f]{64}", expected or ""):
        raise TrainerInputError(f"{SHA_ENV}={expected!r}: expected 64 lowercase hex digits (the job's code sha256)")
    found = sha256_of(bundle)
    if found != expected:
        raise TrainerInputError(
            f"code bundle {bundle} has sha256 {found}, but the job was rendered with {expected}: "
            "the code changed after render; render and submit the job again. Nothing was started."
        )
    return found


def extract(tarball: Path, dest: Path) -> None:
    """Extract as tarfile's "data" filter does, also on Pythons without it (trainer/untar.py)."""
    try:
        untar.extract(str(tarball), str(dest))
    except (untar.UnsafeMember, tarfile.TarError, EOFError) as exc:
        raise TrainerInputError(f"code bundle {tarball}: refused or unreadable: {exc}") from None


def unpack(bundle: Path, dest: Path, sha: str) -> None:
    """Extract into dest once per hash: into a sibling temp folder, then a rename (nodes may share dest)."""
    marker = dest / MARKER
    if marker.is_file() and marker.read_text().strip() == sha:
        return
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{dest.name}.", dir=dest.parent))
    extract(bundle, tmp)
    (tmp / MARKER).write_text(sha + "\n")
    with contextlib.suppress(OSError):  # another task may remove or fill it meanwhile: the rename decides
        if dest.is_dir() and not any(dest.iterdir()):
            dest.rmdir()
    try:
        os.rename(tmp, dest)
    except OSError:
        if marker.is_file() and marker.read_text().strip() == sha:  # another node won the race
            subprocess.run(["rm", "-rf", "--", str(tmp)], check=False)
            return
        raise TrainerInputError(
            f"{DIR_ENV}={dest}: exists and holds other files; point it at a new or empty folder"
        ) from None


def _canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def image_packages() -> dict[str, str]:
    """The image's installed distributions: canonical name -> version (these win)."""
    found: dict[str, str] = {}
    for dist in metadata.distributions():
        name = dist.metadata["Name"]
        if name:
            found.setdefault(_canonical(name), dist.version)
    return found


def requested_names(text: str) -> list[str]:
    """Project names a requirements file asks for (options, paths and URLs have none)."""
    names = []
    for raw in text.splitlines():
        line = raw.split(" #", 1)[0].strip()
        if not line or line.startswith(("#", "-")) or "/" in line.split(";")[0] or line.startswith("."):
            continue
        match = re.match(r"[A-Za-z0-9][A-Za-z0-9._-]*", line)
        if match:
            names.append(_canonical(match.group(0)))
    return names


def _see_image_packages(venv: Path) -> None:
    """--system-site-packages reaches the base interpreter's; when the image's Python is itself a venv,
    a .pth file adds its site-packages too (after the venv's own, so nothing of the image is shadowed
    by what the refusal above lets in)."""
    import sysconfig

    paths = sorted({sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]})
    found = list((venv / "lib").glob("python*/site-packages"))
    for site_dir in found:
        (site_dir / "_trainctl_image.pth").write_text("".join(p + "\n" for p in paths))


def install_requirements(code_dir: Path, requirements: str, cache: Path) -> Path:
    """A venv over the image's site-packages with the requirements; cached by their hash; image pins win."""
    req = code_dir / requirements
    if not req.is_file():
        raise TrainerInputError(f"{REQUIREMENTS_ENV}={requirements}: no such file in the code bundle")
    text = req.read_text()
    pinned = image_packages()
    clash = sorted({n for n in requested_names(text) if n in pinned})
    if clash:
        named = ", ".join(f"{n} (image has {pinned[n]})" for n in clash)
        raise TrainerInputError(
            f"{requirements}: {named} already installed in the image; the image's pinned versions win, "
            "so remove them from the requirements (reinstalling them is refused)"
        )
    tag = f"py{sys.version_info[0]}{sys.version_info[1]}"
    key = hashlib.sha256(text.encode() + tag.encode()).hexdigest()[:16]
    venv = cache / f"{tag}-{key}"
    cache.mkdir(parents=True, exist_ok=True)
    with open(cache / f"{tag}-{key}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if (venv / ".complete").is_file():
            return venv
        subprocess.run(["rm", "-rf", "--", str(venv)], check=False)
        subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", "--without-pip", str(venv)], check=True)
        _see_image_packages(venv)
        constraints = venv / "image-constraints.txt"
        constraints.write_text("".join(f"{n}=={v}\n" for n, v in sorted(pinned.items())))
        done = subprocess.run(
            [
                sys.executable, "-m", "pip", "--python", str(venv / "bin" / "python"), "install",
                "--no-input", "--disable-pip-version-check", "-r", str(req), "-c", str(constraints),
            ],
            cwd=code_dir,
        )  # fmt: skip
        if done.returncode != 0:
            raise TrainerInputError(
                f"{requirements}: pip install failed (exit {done.returncode}); see pip's words above"
            )
        (venv / ".complete").write_text(key + "\n")
    return venv


def prepare(env: Mapping[str, str]) -> Prepared | None:
    """Verify and unpack the bundle the job names (None when it names none)."""
    if not env.get(BUNDLE_ENV):
        return None
    bundle = Path(env[BUNDLE_ENV])
    sha = verify(bundle, env.get(SHA_ENV, ""))
    code_dir = Path(env.get(DIR_ENV) or os.getcwd()).absolute()
    unpack(bundle, code_dir, sha)
    prepared = Prepared(code_dir=code_dir, sha256=sha)
    prepared.function = function.check({**env, DIR_ENV: str(code_dir)})  # a function job's payload and versions
    if env.get(REQUIREMENTS_ENV):
        cache = Path(env.get(VENV_CACHE_ENV) or code_dir.parent / ".trainctl-venvs")
        prepared.venv = install_requirements(code_dir, env[REQUIREMENTS_ENV], cache)
    return prepared


def activate(prepared: Prepared, program: list[str]) -> list[str]:
    """Run from the code folder; with a venv, put it first on PATH and use its python for `python` programs."""
    os.chdir(prepared.code_dir)
    os.environ["TRAINER_CODE_DIR"] = str(prepared.code_dir)
    os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (str(prepared.code_dir), os.environ.get("PYTHONPATH")) if p)
    if prepared.venv is None:
        return program
    bin_dir = prepared.venv / "bin"
    os.environ["VIRTUAL_ENV"] = str(prepared.venv)
    os.environ["PATH"] = os.pathsep.join((str(bin_dir), os.environ.get("PATH", "")))
    with contextlib.suppress(IndexError):
        if Path(program[0]).name.startswith("python") and (program[0] == sys.executable or "/" not in program[0]):
            return [str(bin_dir / "python"), *program[1:]]
    return program


def provenance(env: Mapping[str, str]) -> dict[str, object] | None:
    """What ran, for summary.json: the SDK's TRAINCTL_PROVENANCE (image, code, spec hashes, version)."""
    import json

    text = env.get("TRAINCTL_PROVENANCE")
    if not text:
        return None
    try:
        found = json.loads(text)
    except ValueError:
        return {"unreadable": text[:200]}
    return found if isinstance(found, dict) else None

"""The job's code folder as a deterministic bundle: same folder -> same bytes -> same sha256.

Above the spec (the Job does no I/O). `prepare(job)` is the explicit step before render and submit
(submit/runner.py takes it): it packs the folder once and hands the job the result; render reads it with
`prepared(job)` and opens no file, and the engines send its bytes. Left out: `.git`, caches, what `.gitignore` files ignore (gitignore semantics from `pathspec`) and
`code.exclude`. Files that look like secrets are refused (exit 2) unless `code.include` names them.
The tar.gz has sorted entries, mtime 0, owner 0/0 without names, modes 0644/0755, gzip mtime 0.
"""

from __future__ import annotations

import hashlib
import io
import os
import time
import warnings
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from ..errors import JobError, TrainctlError
from ..function import COMMAND, ENV_SHA, PAYLOAD
from ..spec.code import Bundle, Prepared

if TYPE_CHECKING:
    import pathspec

    from ..function import Function
    from ..spec.code import Code
    from ..spec.job_spec import JobSpec

J = TypeVar("J", bound="JobSpec")

ALWAYS_EXCLUDED: tuple[str, ...] = (".git/", ".hg/", ".svn/", "__pycache__/", "*.pyc", "*.pyo", ".mypy_cache/")
ALWAYS_EXCLUDED += (".pytest_cache/", ".ruff_cache/", ".venv/", ".DS_Store")
SECRET_PATTERNS = (
    ".env",
    ".env.*",
    "*.pem",
    "*.key",
    "*.p12",
    "*.pfx",
    "id_rsa",
    "id_dsa",
    "id_ecdsa",
    "id_ed25519",
    "credentials",
    "credentials.*",
    ".netrc",
    ".pypirc",
    ".npmrc",
    "*.kubeconfig",
    "kubeconfig",
    "service-account*.json",
)
"""Names that usually hold keys or tokens; shipping one by accident puts it on every node and in S3."""
WARN_BYTES = 100 * 1000 * 1000
BUNDLE_NAME = "code.tar.gz"


def code_folder(code: Code, base_dir: Path | None) -> Path:
    """Where the folder is (pure): relative paths are from the job file's folder (else the working directory)."""
    path = Path(code.dir).expanduser()
    return path if path.is_absolute() else (base_dir or Path.cwd()) / path


def resolve_dir(code: Code, base_dir: Path | None, field: str = "code.dir") -> Path:
    """The folder on disk, or a JobError when it is not a folder here."""
    path = code_folder(code, base_dir)
    if not path.is_dir():
        raise JobError([_not_a_folder(path, field)])
    return path


def _not_a_folder(path: Path, field: str) -> str:
    return f"{field}: {str(path)!r} is not a directory; give the folder your train.py is in"


def _gitignores(root: Path, dirpath: Path, specs: dict[Path, pathspec.PathSpec]) -> None:
    import pathspec

    ignore = dirpath / ".gitignore"
    if ignore.is_file():
        specs[dirpath] = pathspec.GitIgnoreSpec.from_lines(ignore.read_text(errors="replace").splitlines())


def _ignored(rel: str, is_dir: bool, root: Path, specs: dict[Path, pathspec.PathSpec]) -> bool:
    """Whether any .gitignore on the way down ignores `rel` (relative to root)."""
    full = root / rel
    for where, spec in specs.items():
        try:
            sub = full.relative_to(where).as_posix()
        except ValueError:
            continue
        if spec.match_file(sub + "/" if is_dir else sub):
            return True
    return False


def list_files(root: Path, code: Code) -> list[str]:
    """Paths (posix, relative to root) that go into the bundle, sorted (pathspec loaded here: a job without
    `code:` renders without it)."""
    import pathspec

    always = pathspec.GitIgnoreSpec.from_lines(ALWAYS_EXCLUDED)
    user = pathspec.GitIgnoreSpec.from_lines(code.exclude)
    specs: dict[Path, pathspec.PathSpec] = {}
    found: list[str] = []
    for dirpath, dirnames, filenames in os.walk(root, followlinks=False):
        here = Path(dirpath)
        _gitignores(root, here, specs)
        rel_dir = here.relative_to(root).as_posix()
        prefix = "" if rel_dir == "." else rel_dir + "/"
        kept = []
        for name in sorted(dirnames):
            rel = prefix + name
            if (here / name).is_symlink():
                filenames.append(name)  # a link to a folder is refused below, like any link leaving the folder
                continue
            if not (always.match_file(rel + "/") or user.match_file(rel + "/") or _ignored(rel, True, root, specs)):
                kept.append(name)
        dirnames[:] = kept
        for name in filenames:
            rel = prefix + name
            if always.match_file(rel) or user.match_file(rel) or _ignored(rel, False, root, specs):
                continue
            found.append(rel)
    return sorted(found)


def secret_looking(paths: list[str], code: Code) -> list[str]:
    """Files whose names look like secrets and that code.include does not name."""
    import pathspec

    secret = pathspec.GitIgnoreSpec.from_lines(SECRET_PATTERNS)
    allowed = pathspec.GitIgnoreSpec.from_lines(code.include)
    return [p for p in paths if secret.match_file(p) and not allowed.match_file(p)]


def pack(root: Path | None, code: Code | None, extra: Function | None = None) -> Bundle:
    """Pack `root` as code says; refuse secrets and links out of the folder; warn when it is large. A function
    job's payload (`extra`) goes in too, at function.PAYLOAD: one bundle, verified on every node the same way."""
    entries = [] if root is None or code is None else _folder_entries(root, code)
    if extra is not None:
        entries.append((PAYLOAD, extra.payload, 0o644))
    files = tuple((rel, len(data)) for rel, data, _ in entries)
    data = _targz(entries)
    notes: list[str] = []
    total = sum(size for _, size in files)
    if max(total, len(data)) > WARN_BYTES:
        largest = sorted(files, key=lambda f: (-f[1], f[0]))[:5]
        named = ", ".join(f"{p} ({s / 1e6:.1f} MB)" for p, s in largest)
        notes.append(
            f"code bundle holds {total / 1e6:.0f} MB ({len(data) / 1e6:.0f} MB packed; over "
            f"{WARN_BYTES / 1e6:g} MB); largest: {named}. "
            "Exclude data and checkpoints with code.exclude or .gitignore; pass data with `data:`"
        )
        warnings.warn(notes[-1], UserWarning, stacklevel=2)
    source: Path | str = root if root is not None else f"function {extra.name if extra else '?'}"
    requirements = code.requirements if code is not None else None
    return Bundle(data, hashlib.sha256(data).hexdigest(), files, source, requirements, tuple(notes))


def _folder_entries(root: Path, code: Code) -> list[tuple[str, bytes, int]]:
    """(path, bytes, mode) of every file the folder ships, sorted; secrets and links out of it refused."""
    paths = list_files(root, code)
    refused = secret_looking(paths, code)
    if refused:
        raise JobError(
            [
                f"code.dir: {', '.join(refused)} look(s) like secrets and would be shipped to every node; "
                "add them to code.exclude (or .gitignore), or to code.include if you do mean to ship them"
            ]
        )
    if code.requirements is not None and code.requirements not in paths:
        raise JobError([f"code.requirements: {code.requirements!r} is not a file in the bundle of {str(root)!r}"])
    real_root = root.resolve()
    entries: list[tuple[str, bytes, int]] = []
    for rel in paths:
        path = root / rel
        if path.is_symlink() and not path.resolve().is_relative_to(real_root):
            raise JobError([f"code.dir: {rel} links outside the folder; copy the file in instead"])
        if not path.is_file():
            raise JobError([f"code.dir: {rel} is not a regular file (a link to a folder?); exclude it"])
        entries.append((rel, path.read_bytes(), 0o755 if os.access(path, os.X_OK) else 0o644))
    return entries


def _targz(entries: list[tuple[str, bytes, int]]) -> bytes:
    """The deterministic tar.gz: entries as given, mtime 0, owner 0/0 without names, gzip mtime 0."""
    import gzip  # here: only a job with code is packed; a render of any other loads neither
    import tarfile

    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for rel, data, mode in entries:
            info = tarfile.TarInfo(rel)
            info.size = len(data)
            info.mtime = 0
            info.mode = mode
            info.uid = info.gid = 0
            info.uname = info.gname = ""
            tar.addfile(info, io.BytesIO(data))
    out = io.BytesIO()
    with gzip.GzipFile(fileobj=out, mode="wb", mtime=0, filename="", compresslevel=9) as gz:
        gz.write(raw.getvalue())
    return out.getvalue()


def bundle_for(job: JobSpec) -> Bundle | None:
    """The job's code folder packed now (None without `code:`); a JobError when the folder is not here."""
    code = job.code_spec
    return None if code is None else pack(resolve_dir(code, job.base_dir, job.code_field), code, job.function)


def prepare(job: J) -> J:
    """The step before render and submit: the job with its code folder packed (the job itself without
    `code:`, or when it already carries a bundle made from the same `code:`). A folder that is not here is
    recorded as missing, not refused: a SageMaker render can be made away from the code (it then names no
    hash); every other render, and every submit, refuses it naming the folder."""
    code, function = job.code_spec, job.function
    if function is None and job.command == COMMAND and ENV_SHA not in job.env:  # (a map's trials name it in env)
        raise JobError(
            [f"job {job.name!r} has no program: give it `trainer:` or `command:`, or call job.with_function(fn)"]
        )
    if (code is None and function is None) or job.prepared is not None:
        return job
    folder = code_folder(code, job.base_dir) if code is not None else None
    found = folder is None or folder.is_dir()
    bundle = pack(folder, code, function) if found else None
    sha = function.sha256 if function is not None else None
    return job.with_prepared(Prepared(code, job.base_dir, folder, bundle, sha))


class NotPrepared(TrainctlError):
    """Render was handed a `code:` job whose bundle was not prepared: a caller skipped `prepare` (exit 1)."""


def prepared_if_present(job: JobSpec) -> Bundle | None:
    """The prepared bundle (pure: no file is read); None without `code:` or when its folder was not there."""
    if job.code_spec is None and job.function is None:
        return None
    found = job.prepared
    if found is None:
        raise NotPrepared(
            f"job {job.name!r}: its code bundle was not prepared; call trainctl.submit.bundle.prepare(job) before "
            "rendering it (Job.render, Job.submit and the CLI do)"
        )
    return found.bundle


def prepared(job: JobSpec) -> Bundle | None:
    """The prepared bundle (None without `code:`); a JobError naming the folder when it was not there."""
    bundle = prepared_if_present(job)
    found = job.prepared
    if bundle is None and found is not None and found.folder is not None:
        raise JobError([_not_a_folder(found.folder, job.code_field)])
    return bundle


def launcher_env(bundle: Bundle, path: str, code_dir: str, venv_cache: str | None = None) -> dict[str, str]:
    """What the launcher reads to verify and unpack the bundle (trainer/bundle.py, docs/contracts.md)."""
    env = {"TRAINER_CODE_BUNDLE": path, "TRAINER_CODE_DIR": code_dir, "TRAINER_CODE_SHA256": bundle.sha256}
    if bundle.requirements:
        env["TRAINER_CODE_REQUIREMENTS"] = bundle.requirements
        if venv_cache:
            env["TRAINER_VENV_CACHE"] = venv_cache
    return env


def describe(bundle: Bundle, where: str) -> str:
    """One line for a render: what is shipped, where to, and its sha256."""
    return (
        f"code: {bundle.source} ({len(bundle.files)} files, {bundle.size:,} bytes) -> {where}; sha256 {bundle.sha256}"
    )


class UploadProgress:
    """A byte counter for uploads (boto3's Callback) that shows a rich progress bar once one takes over a second."""

    def __init__(self, total: int, label: str, after_s: float = 1.0) -> None:
        self.total, self.label, self.after_s = total, label, after_s
        self.done = 0
        self._start = 0.0
        self._bar: Any = None
        self._task: Any = None

    def __enter__(self) -> UploadProgress:
        self._start = time.monotonic()
        return self

    def __call__(self, nbytes: int) -> None:
        self.done += nbytes
        if self._bar is None and time.monotonic() - self._start > self.after_s:
            from rich.progress import BarColumn, DownloadColumn, Progress, TextColumn, TransferSpeedColumn

            self._bar = Progress(
                TextColumn("{task.description}"), BarColumn(), DownloadColumn(), TransferSpeedColumn(), transient=True
            )
            self._bar.start()
            self._task = self._bar.add_task(self.label, total=self.total)
        if self._bar is not None:
            self._bar.update(self._task, completed=self.done)

    def __exit__(self, *exc: object) -> None:
        if self._bar is not None:
            self._bar.stop()

    @property
    def shown(self) -> bool:
        return self._bar is not None

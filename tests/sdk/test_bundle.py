"""The code bundle: same folder -> same bytes; what is left out; secrets refused; large bundles named."""

from __future__ import annotations

import hashlib
import io
import os
import shutil
import subprocess
import sys
import tarfile
import time
import warnings
from pathlib import Path

import pytest
from trainctl import Job, JobError
from trainctl.spec.code import Code
from trainctl.submit import bundle as B

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "code-job"


def _folder(root: Path) -> Path:
    (root / "pkg").mkdir(parents=True)
    (root / "train.py").write_text("import helper\n")
    (root / "helper.py").write_text("X = 1\n")
    (root / "pkg" / "mod.py").write_text("Y = 2\n")
    (root / "run.sh").write_text("#!/bin/sh\n")
    (root / "run.sh").chmod(0o755)
    return root


def test_same_folder_same_bytes_wherever_and_whenever(tmp_path: Path) -> None:
    a = _folder(tmp_path / "a")
    first = B.pack(a, Code(dir="."))
    b = tmp_path / "b"
    shutil.copytree(a, b)  # other path, other mtimes and inode order
    for path in b.rglob("*"):
        os.utime(path, (time.time() + 1000, time.time() + 1000))
    second = B.pack(b, Code(dir="."))
    assert first.data == second.data and first.sha256 == second.sha256
    assert first.sha256 == hashlib.sha256(first.data).hexdigest()
    # gzip header mtime 0, entries sorted, owners and times zeroed, modes normalised
    assert first.data[4:8] == b"\0\0\0\0"
    with tarfile.open(fileobj=io.BytesIO(first.data)) as tar:
        members = tar.getmembers()
    assert [m.name for m in members] == sorted(m.name for m in members) == [
        "helper.py", "pkg/mod.py", "run.sh", "train.py"
    ]  # fmt: skip
    assert {(m.mtime, m.uid, m.gid, m.uname, m.gname) for m in members} == {(0, 0, 0, "", "")}
    assert {m.name: m.mode for m in members}["run.sh"] == 0o755
    assert {m.name: m.mode for m in members}["helper.py"] == 0o644
    (b / "helper.py").write_text("X = 2\n")
    assert B.pack(b, Code(dir=".")).sha256 != first.sha256


def test_left_out_git_gitignore_exclude_and_caches(tmp_path: Path) -> None:
    root = _folder(tmp_path / "src")
    (root / ".git").mkdir()
    (root / ".git" / "config").write_text("[core]\n")
    (root / "__pycache__").mkdir()
    (root / "__pycache__" / "helper.cpython-311.pyc").write_bytes(b"\0")
    (root / ".gitignore").write_text("data/\n*.ckpt\n!keep.ckpt\n")
    (root / "data").mkdir()
    (root / "data" / "big.bin").write_bytes(b"x" * 10)
    (root / "model.ckpt").write_bytes(b"c")
    (root / "keep.ckpt").write_bytes(b"k")
    (root / "pkg" / ".gitignore").write_text("local_*.py\n")
    (root / "pkg" / "local_notes.py").write_text("")
    (root / "notes.md").write_text("")
    files = B.list_files(root, Code(dir=".", exclude=["*.md"]))
    assert files == [".gitignore", "helper.py", "keep.ckpt", "pkg/.gitignore", "pkg/mod.py", "run.sh", "train.py"]


def test_git_check_ignore_agrees_with_pathspec(tmp_path: Path) -> None:
    """git is the oracle for .gitignore semantics: every file we keep, git keeps, and vice versa."""
    if shutil.which("git") is None:
        pytest.skip("git is not installed")
    root = _folder(tmp_path / "repo")
    (root / ".gitignore").write_text("build/\n*.log\n/top_only.txt\nsub/**/deep.txt\n!important.log\n")
    for rel in ["build/x.py", "a.log", "important.log", "top_only.txt", "pkg/top_only.txt", "sub/a/b/deep.txt"]:
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text("")
    subprocess.run(["git", "init", "-q", str(root)], check=True)
    ours = set(B.list_files(root, Code(dir=".")))
    every = {p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_file() and ".git/" not in p.as_posix()}
    every.discard(".git")
    every = {p for p in every if not p.startswith(".git/")}
    ignored = subprocess.run(
        ["git", "-C", str(root), "check-ignore", "--stdin"],
        input="\n".join(sorted(every)),
        capture_output=True,
        text=True,
    ).stdout.split()
    assert ours == every - set(ignored)


@pytest.mark.parametrize("name", [".env", "config/.env.prod", "server.pem", "id_rsa", "credentials", "tls.key"])
def test_secret_looking_files_are_refused_unless_included(tmp_path: Path, name: str) -> None:
    root = _folder(tmp_path / "src")
    (root / name).parent.mkdir(parents=True, exist_ok=True)
    (root / name).write_text("TOKEN=x\n")
    with pytest.raises(JobError) as err:
        B.pack(root, Code(dir="."))
    assert name in str(err.value) and "code.include" in str(err.value) and err.value.exit_code == 2
    assert name in B.list_files(root, Code(dir=".", include=[name]))
    B.pack(root, Code(dir=".", include=[name]))  # explicitly included: shipped
    B.pack(root, Code(dir=".", exclude=[name]))  # excluded: not shipped, not refused


def test_env_file_refused_by_the_cli_with_exit_2(tmp_path: Path) -> None:
    folder = tmp_path / "code-job"
    shutil.copytree(EXAMPLE, folder)
    (folder / "src" / ".env").write_text("API_KEY=secret\n")
    trainctl = Path(sys.executable).parent / "trainctl"
    done = subprocess.run(
        [str(trainctl), "render", str(folder / "job.yaml"), "--target", "local"], capture_output=True, text=True
    )
    assert done.returncode == 2, done.stdout + done.stderr
    assert ".env" in done.stderr and "secret" in done.stderr
    ok = subprocess.run(
        [str(trainctl), "render", str(folder / "job.yaml"), "--target", "local", "--set", 'code.include=[".env"]'],
        capture_output=True,
        text=True,
    )
    assert ok.returncode == 0, ok.stderr


def test_large_bundle_warns_naming_the_largest_files(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root = _folder(tmp_path / "src")
    (root / "weights.bin").write_bytes(os.urandom(3000))
    (root / "table.csv").write_bytes(os.urandom(2000))
    monkeypatch.setattr(B, "WARN_BYTES", 4000)
    with pytest.warns(UserWarning, match=r"largest: weights\.bin \(0\.0 MB\), table\.csv") as caught:
        found = B.pack(root, Code(dir="."))
    assert found.notes and "code.exclude" in str(caught[0].message)
    monkeypatch.setattr(B, "WARN_BYTES", 100_000)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        B.pack(root, Code(dir="."))


def test_links_out_of_the_folder_are_refused(tmp_path: Path) -> None:
    root = _folder(tmp_path / "src")
    (tmp_path / "outside.txt").write_text("x")
    (root / "link.txt").symlink_to(tmp_path / "outside.txt")
    with pytest.raises(JobError, match=r"link\.txt links outside the folder"):
        B.pack(root, Code(dir="."))


def test_requirements_must_be_in_the_bundle(tmp_path: Path) -> None:
    root = _folder(tmp_path / "src")
    with pytest.raises(JobError, match=r"code\.requirements: 'requirements\.txt' is not a file"):
        B.pack(root, Code(dir=".", requirements="requirements.txt"))
    (root / "requirements.txt").write_text("tinypkg\n")
    assert B.pack(root, Code(dir=".", requirements="requirements.txt")).requirements == "requirements.txt"


def test_job_code_forms_and_the_source_dir_alias() -> None:
    base = {"name": "j", "command": ["python", "train.py"]}
    assert Job.parse({**base, "code": "./src"}).code == Code(dir="./src")
    full = Job.parse({**base, "code": {"dir": "src", "exclude": ["*.md"], "requirements": "req.txt"}})
    assert full.code_spec is not None and full.code_spec.requirements == "req.txt"
    with pytest.raises(JobError, match=r"code\.requirements"):
        Job.parse({**base, "code": {"dir": "src", "requirements": "../req.txt"}})
    with pytest.raises(JobError, match=r"code\.bogus"):
        Job.parse({**base, "code": {"dir": "src", "bogus": 1}})
    with pytest.warns(FutureWarning, match=r"sagemaker\.source_dir is deprecated"):
        old = Job.parse({**base, "sagemaker": {"source_dir": "./src"}})
    assert old.code is None and old.code_spec == Code(dir="./src")
    with pytest.raises(JobError, match=r"sagemaker\.source_dir"):
        Job.parse({**base, "code": "./src", "sagemaker": {"source_dir": "./src"}})

"""The launcher's side of `code:`: verify the sha256 first, unpack safely, layer requirements, then run."""

from __future__ import annotations

import io
import os
import subprocess
import sys
import tarfile
from pathlib import Path
from typing import Any

import pytest
from trainctl.spec.code import Code
from trainctl.submit.bundle import pack
from trainer import bundle as TB
from trainer import launch, untar
from trainer.errors import TrainerInputError


def _code(tmp_path: Path, **files: str) -> tuple[Path, str]:
    src = tmp_path / "src"
    src.mkdir()
    for name, text in {"train.py": "import helper\nprint(helper.X)\n", "helper.py": "X = 41 + 1\n", **files}.items():
        (src / name).write_text(text)
    bundle = pack(src, Code(dir="."))
    path = tmp_path / "code.tar.gz"
    path.write_bytes(bundle.data)
    return path, bundle.sha256


def test_a_changed_bundle_is_refused_and_nothing_starts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    path, rendered = _code(tmp_path)
    (tmp_path / "src" / "helper.py").write_text("X = 0\n")  # edited after render, packed again
    path.write_bytes(pack(tmp_path / "src", Code(dir=".")).data)
    now = TB.sha256_of(path)
    started = tmp_path / "started"
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv(TB.BUNDLE_ENV, str(path))
    monkeypatch.setenv(TB.SHA_ENV, rendered)
    monkeypatch.setenv(TB.DIR_ENV, str(tmp_path / "run" / "code"))
    for var in ("SLURM_JOB_ID", "PET_NNODES", "TORCHELASTIC_RUN_ID", "WORLD_SIZE"):
        monkeypatch.delenv(var, raising=False)
    code = launch.main(["--nproc-per-node", "1", "--", sys.executable, "-c", f"open({str(started)!r}, 'w')"])
    err = capsys.readouterr().err
    assert code == 2
    assert rendered in err and now in err and "changed after render" in err, err
    assert not started.exists() and not (tmp_path / "run" / "code").exists()


def test_verified_bundle_unpacks_once_and_runs_from_there(tmp_path: Path) -> None:
    path, sha = _code(tmp_path)
    dest = tmp_path / "run" / "code"
    env = {TB.BUNDLE_ENV: str(path), TB.SHA_ENV: sha, TB.DIR_ENV: str(dest)}
    prepared = TB.prepare(env)
    assert prepared is not None and prepared.code_dir == dest and prepared.venv is None
    assert sorted(p.name for p in dest.iterdir()) == [TB.MARKER, "helper.py", "train.py"]
    done = subprocess.run([sys.executable, "train.py"], cwd=dest, capture_output=True, text=True, check=True)
    assert done.stdout == "42\n"
    (dest / "helper.py").write_text("X = 0\n")  # a second node on shared storage: same hash, reused as is
    TB.prepare(env)
    assert (dest / "helper.py").read_text() == "X = 0\n"
    other = tmp_path / "other.tar.gz"
    other.write_bytes(pack(tmp_path / "src", Code(dir=".", exclude=["helper.py"])).data)
    with pytest.raises(TrainerInputError, match="exists and holds other files"):
        TB.prepare({TB.BUNDLE_ENV: str(other), TB.SHA_ENV: TB.sha256_of(other), TB.DIR_ENV: str(dest)})


def _empty_work_folder(tmp_path: Path) -> tuple[Path, str, Path]:
    path, sha = _code(tmp_path)
    dest = tmp_path / "run" / "work"
    dest.mkdir(parents=True)
    return path, sha, dest


def _other_task_first(monkeypatch: pytest.MonkeyPatch, method: str, dest: Path, other: Any) -> list[Path]:
    """Path.<method> on `dest` runs `other` (the other node or task) first, once: a race's window, held open."""
    real = getattr(Path, method)
    raced: list[Path] = []

    def in_the_window(self: Path) -> Any:
        if self == dest and not raced:
            raced.append(self)
            other()
        return real(self)

    monkeypatch.setattr(Path, method, in_the_window)
    return raced


def test_two_nodes_unpacking_into_one_empty_folder_at_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Both pods of a 2-node job find the run's work/ folder empty; the other node removes it and renames its
    copy in between this node's check and its own rmdir (CI: "cannot use ...: Directory not empty"). The
    rename decides: this node finds the other's marker and runs from its copy."""
    path, sha, dest = _empty_work_folder(tmp_path)
    raced = _other_task_first(monkeypatch, "rmdir", dest, lambda: TB.unpack(path, dest, sha))
    TB.unpack(path, dest, sha)
    monkeypatch.undo()
    assert raced and (dest / TB.MARKER).read_text().strip() == sha
    assert sorted(p.name for p in dest.iterdir()) == [TB.MARKER, "helper.py", "train.py"]
    assert not list(dest.parent.glob(".work.*")), "the loser's temporary copy is removed"


def test_the_folder_removed_between_the_check_and_the_listing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The other window (CI, SLURM srun mode, 4 tasks on 2 nodes: "cannot use .../work: No such file or
    directory"): this task sees work/ as a folder, the other removes it before this one lists it. The listing's
    error is the race, not a fault: the rename still decides."""
    path, sha, dest = _empty_work_folder(tmp_path)
    raced = _other_task_first(monkeypatch, "iterdir", dest, dest.rmdir)
    TB.unpack(path, dest, sha)
    monkeypatch.undo()
    assert raced and (dest / TB.MARKER).read_text().strip() == sha
    assert sorted(p.name for p in dest.iterdir()) == [TB.MARKER, "helper.py", "train.py"]


def test_bad_sha_text_and_missing_bundle(tmp_path: Path) -> None:
    path, _ = _code(tmp_path)
    with pytest.raises(TrainerInputError, match="64 lowercase hex"):
        TB.verify(path, "abc")
    with pytest.raises(TrainerInputError, match="did not arrive"):
        TB.verify(tmp_path / "nope.tar.gz", "0" * 64)


def _evil(tmp_path: Path) -> Path:
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w:gz") as tar:
        info = tarfile.TarInfo("../escaped.txt")
        info.size = 1
        tar.addfile(info, io.BytesIO(b"x"))
    path = tmp_path / "evil.tar.gz"
    path.write_bytes(raw.getvalue())
    return path


def test_entries_leaving_the_folder_are_refused(tmp_path: Path) -> None:
    path = _evil(tmp_path)
    dest = tmp_path / "a" / "code"
    with pytest.raises(TrainerInputError, match="refused"):
        TB.prepare({TB.BUNDLE_ENV: str(path), TB.SHA_ENV: TB.sha256_of(path), TB.DIR_ENV: str(dest)})
    assert not (tmp_path / "a" / "escaped.txt").exists()
    # the guard used where tarfile has no extraction filter (Python < 3.11.4) refuses the same entry
    with tarfile.open(path) as tar, pytest.raises(untar.UnsafeMember, match="outside"):
        untar.data_member(tar.getmembers()[0], str(tmp_path / "b"))


def test_requirements_may_not_reinstall_what_the_image_pins(tmp_path: Path) -> None:
    (tmp_path / "code").mkdir()
    (tmp_path / "code" / "requirements.txt").write_text("# ours\nTorch>=2.0\nnumpy\nsomething-new==1.0\n")
    with pytest.raises(TrainerInputError) as err:
        TB.install_requirements(tmp_path / "code", "requirements.txt", tmp_path / "cache")
    text = str(err.value)
    assert "torch (image has 2.13.0" in text and "numpy (image has" in text and "something-new" not in text


@pytest.mark.slow
def test_requirements_go_into_a_cached_venv_over_the_image(tmp_path: Path, make_wheel: Any) -> None:
    code = tmp_path / "code"
    (code / "wheels").mkdir(parents=True)
    make_wheel(code / "wheels", "tinypkg", "0.3")
    (code / "requirements.txt").write_text("--no-index\n--find-links wheels\ntinypkg==0.3\n")
    cache = tmp_path / "cache"
    venv = TB.install_requirements(code, "requirements.txt", cache)
    probe = "import tinypkg, torch; print(tinypkg.VALUE, torch.__version__)"
    done = subprocess.run([str(venv / "bin" / "python"), "-c", probe], capture_output=True, text=True, check=True)
    value, torch_version = done.stdout.split()
    assert value == "0.3" and torch_version.startswith(
        "2.13.0"
    )  # the image's torch, seen through --system-site-packages
    stamp = os.stat(venv / ".complete").st_mtime_ns
    assert TB.install_requirements(code, "requirements.txt", cache) == venv  # same hash: reused, not rebuilt
    assert os.stat(venv / ".complete").st_mtime_ns == stamp
    assert subprocess.run([sys.executable, "-c", "import tinypkg"], capture_output=True).returncode != 0

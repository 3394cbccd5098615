"""The launcher's code-tarball extraction: the "data" filter where Python has it (>= 3.11.4), the
same rules ported where it does not (Debian bookworm's 3.11.2 in the cpu image; run there by
tests/image/test_build.py)."""

from __future__ import annotations

import io
import tarfile
from pathlib import Path

import pytest
from trainer import untar


def _tarball(path: Path, members: list[tuple[tarfile.TarInfo, bytes | None]]) -> str:
    with tarfile.open(path, "w:gz") as tar:
        for info, data in members:
            tar.addfile(info, io.BytesIO(data) if data is not None else None)
    return str(path)


def _file(name: str, data: bytes = b"x", mode: int = 0o644) -> tuple[tarfile.TarInfo, bytes]:
    info = tarfile.TarInfo(name)
    info.size, info.mode = len(data), mode
    return info, data


def _link(name: str, target: str, kind: bytes = tarfile.SYMTYPE) -> tuple[tarfile.TarInfo, None]:
    info = tarfile.TarInfo(name)
    info.type, info.linkname = kind, target
    return info, None


@pytest.fixture(params=["filter", "fallback"])
def mode(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    if request.param == "fallback":
        monkeypatch.delattr(tarfile, "data_filter", raising=False)
    elif not hasattr(tarfile, "data_filter"):
        pytest.skip("this Python has no tarfile extraction filters")
    return str(request.param)


def test_a_good_tarball_extracts_with_safe_modes(tmp_path: Path, mode: str) -> None:
    src = _tarball(
        tmp_path / "code.tar.gz",
        [
            _file("pkg/train.py", b"print(1)\n", 0o4777),
            _file("run.sh", b"#!/bin/sh\n", 0o755),
            _link("pkg/alias.py", "train.py"),
        ],
    )
    dest = tmp_path / "out"
    untar.extract(src, str(dest))
    assert (dest / "pkg/train.py").read_text() == "print(1)\n"
    assert (dest / "pkg/train.py").stat().st_mode & 0o7777 == 0o755  # set-uid and o+w stripped
    assert (dest / "run.sh").stat().st_mode & 0o111
    assert (dest / "pkg/alias.py").read_text() == "print(1)\n"


@pytest.mark.parametrize(
    "bad",
    [
        [_file("../escape.py")],
        [_link("evil", "/etc/passwd")],
        [_link("evil", "../../outside")],
        [_link("hard", "../x", tarfile.LNKTYPE)],
    ],
    ids=["dotdot", "abs-symlink", "symlink-out", "hardlink-out"],
)
def test_unsafe_members_are_refused(tmp_path: Path, mode: str, bad: list[tuple[tarfile.TarInfo, bytes | None]]) -> None:
    src = _tarball(tmp_path / "bad.tar.gz", bad)
    with pytest.raises(untar.UnsafeMember):
        untar.extract(src, str(tmp_path / "out" / "deep"))
    assert not (tmp_path / "escape.py").exists() and not (tmp_path / "out" / "escape.py").exists()


def test_device_members_are_refused(tmp_path: Path, mode: str) -> None:
    fifo = tarfile.TarInfo("pipe")
    fifo.type = tarfile.FIFOTYPE
    src = _tarball(tmp_path / "dev.tar.gz", [(fifo, None)])
    with pytest.raises(untar.UnsafeMember):
        untar.extract(src, str(tmp_path / "out"))


def test_leading_slashes_are_stripped(tmp_path: Path, mode: str) -> None:
    src = _tarball(tmp_path / "abs.tar.gz", [_file("/abs.py")])
    untar.extract(src, str(tmp_path / "out"))
    assert (tmp_path / "out/abs.py").exists()

"""Checkpoint files: the resume-time CRC check of torch-saved files (trainer.checkpoint.files.verify_zip),
and the clean-up of what a killed writer left behind."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from trainer.checkpoint import files as ckpt
from trainer.errors import CheckpointCorrupt

from .conftest import flip_tensor_byte


def _saved(path: Path) -> Path:
    torch.save({"w": torch.arange(4096, dtype=torch.float32), "step": 3}, path)
    return path


def test_intact_file_passes(tmp_path: Path) -> None:
    ckpt.verify_zip(_saved(tmp_path / "state.pt"))


def test_flipped_tensor_byte_is_caught_though_torch_load_accepts_it(tmp_path: Path) -> None:
    file = _saved(tmp_path / "state.pt")
    size = file.stat().st_size
    member = flip_tensor_byte(file)
    assert file.stat().st_size == size
    loaded = torch.load(file, weights_only=True)  # the reason for the check: no error here
    assert not torch.equal(loaded["w"], torch.arange(4096, dtype=torch.float32))
    with pytest.raises(CheckpointCorrupt, match=f"{file}: CRC-32 mismatch in member {member}"):
        ckpt.verify_zip(file)


def test_not_a_zip_is_named(tmp_path: Path) -> None:
    file = tmp_path / "state.pt"
    file.write_bytes(b"\0garbage" * 64)
    with pytest.raises(CheckpointCorrupt, match=f"{file}: not a readable torch.save archive"):
        ckpt.verify_zip(file)


def test_verify_files_checks_pt_files_only_and_honours_no_crc(tmp_path: Path) -> None:
    _saved(tmp_path / "state.pt")
    (tmp_path / "dcp").mkdir()
    (tmp_path / "dcp" / "__0_0.distcp").write_bytes(b"not a zip")
    meta = {"files": {"state.pt": 1, "dcp/__0_0.distcp": 9}}
    ckpt.verify_files(tmp_path, meta)
    flip_tensor_byte(tmp_path / "state.pt")
    with pytest.raises(CheckpointCorrupt, match="CRC-32 mismatch"):
        ckpt.verify_files(tmp_path, meta)
    # saved under torch.serialization.set_crc32_options(False): the CRC fields are zero, nothing to check
    ckpt.verify_files(tmp_path, {**meta, "zip_crc32": False})


def test_file_saved_without_crc_fails_testzip(tmp_path: Path) -> None:
    """Why meta.json records zip_crc32: without it every such file would look corrupt."""
    torch.serialization.set_crc32_options(False)
    try:
        file = _saved(tmp_path / "state.pt")
    finally:
        torch.serialization.set_crc32_options(True)
    with pytest.raises(CheckpointCorrupt, match="CRC-32 mismatch"):
        ckpt.verify_zip(file)


def test_clean_stale_removes_what_a_killed_writer_left(tmp_path: Path) -> None:
    """A writer killed mid-save leaves `.tmp-step-*`, or a `.latest.PID` pointer not yet renamed."""
    (tmp_path / ".tmp-step-00000008").mkdir()
    (tmp_path / ".tmp-step-00000008" / "state.pt").write_bytes(b"half")
    (tmp_path / ".latest.4242").write_text("step-00000008\n")
    (tmp_path / "step-00000004").mkdir()
    (tmp_path / "latest").write_text("step-00000004\n")
    ckpt.clean_stale(tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["latest", "step-00000004"]

"""Checkpoint files: the region CRC-32s summed beside the write and checked at resume
(trainer.checkpoint.checksums), the zip CRC check of checkpoints written before them (`verify_zip`), and the
clean-up of what a killed writer left behind."""

from __future__ import annotations

import zlib
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import torch
from trainer.checkpoint import checksums
from trainer.checkpoint import files as ckpt
from trainer.errors import CheckpointCorrupt

from .conftest import flip_tensor_byte


def _saved(path: Path) -> Path:
    torch.save({"w": torch.arange(4096, dtype=torch.float32), "step": 3}, path)
    return path


def test_intact_file_passes(tmp_path: Path) -> None:
    checksums.verify_zip(_saved(tmp_path / "state.pt"))


def test_flipped_tensor_byte_is_caught_though_torch_load_accepts_it(tmp_path: Path) -> None:
    file = _saved(tmp_path / "state.pt")
    size = file.stat().st_size
    member = flip_tensor_byte(file)
    assert file.stat().st_size == size
    loaded = torch.load(file, weights_only=True)  # the reason for the check: no error here
    assert not torch.equal(loaded["w"], torch.arange(4096, dtype=torch.float32))
    with pytest.raises(CheckpointCorrupt, match=f"{file}: CRC-32 mismatch in member {member}"):
        checksums.verify_zip(file)


def test_not_a_zip_is_named(tmp_path: Path) -> None:
    file = tmp_path / "state.pt"
    file.write_bytes(b"\0garbage" * 64)
    with pytest.raises(CheckpointCorrupt, match=f"{file}: not a readable torch.save archive"):
        checksums.verify_zip(file)


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
        checksums.verify_zip(file)


def _regions(data: bytes, region: int) -> list[int]:
    return [zlib.crc32(data[i : i + region]) for i in range(0, len(data), region)]


@pytest.mark.parametrize("sizes", [[10, 3000, 70_000], [1_500_000], [7, 2_100_000, 1, 65_536, 1_200_000]])
def test_region_crcs_match_the_file_whatever_the_writes(tmp_path: Path, sizes: list[int]) -> None:
    """Small writes summed inline, large ones by the pool while written; pieces cross region boundaries."""
    region = 65_536
    data = torch.randint(0, 256, (sum(sizes),), dtype=torch.uint8).numpy().tobytes()
    file = tmp_path / "f.bin"
    with open(file, "wb") as fh, ThreadPoolExecutor(3) as pool:
        writer = checksums.RegionCrcWriter(fh, pool, region)
        at = 0
        for n in sizes:
            assert writer.write(memoryview(data)[at : at + n]) == n
            at += n
    assert file.read_bytes() == data
    record = writer.record()
    assert record == {"region_bytes": region, "crc32": _regions(data, region)}
    checksums.verify_regions(file, record)


def _save_dir(tmp_path: Path) -> Path:
    torch.manual_seed(0)
    model = torch.nn.Linear(64, 32)
    optimizer = torch.optim.AdamW(model.parameters())
    model(torch.randn(2, 64)).sum().backward()
    optimizer.step()
    info = ckpt.SaveInfo(step=5, epoch=0, position=5, samples=5, model="m", model_args={}, world_size=1,
                         strategy="ddp")  # fmt: skip
    state = ckpt.snapshot(info, model, optimizer, {}, 0, copy_off=False)
    assert state is not None
    return ckpt.write(tmp_path / "ckpts", info, state, keep=1)


@pytest.fixture
def one_rank(tmp_path: Path):  # type: ignore[no-untyped-def]
    import torch.distributed as dist

    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'pg'}", rank=0, world_size=1)
    yield
    dist.destroy_process_group()


@pytest.mark.usefixtures("one_rank")
def test_a_save_records_region_crcs_and_a_flipped_byte_anywhere_is_caught(tmp_path: Path) -> None:
    """The trainer's save writes no zip CRCs (zip_crc32: false) but the file's region CRC-32s; a flipped
    bit in a tensor, or in the archive's own records, fails the resume check and names the bytes."""
    path = _save_dir(tmp_path)
    meta = ckpt.read_meta(path)
    file = path / ckpt.STATE
    data = file.read_bytes()
    assert meta["zip_crc32"] is False
    assert meta["checksums"] == {ckpt.STATE: {"region_bytes": checksums.REGION, "crc32": [zlib.crc32(data)]}}
    ckpt.verify_files(path, meta)
    assert torch.load(file, weights_only=True)["model"]["weight"].shape == (32, 64)
    assert torch.serialization.get_crc32_options() is True  # the setting is restored after the save
    for flip in (len(data) // 2, 20, len(data) - 30):  # a tensor byte, a local header, the central directory
        bad = bytearray(data)
        bad[flip] ^= 0x5A
        file.write_bytes(bad)
        with pytest.raises(CheckpointCorrupt, match=f"{file}: CRC-32 mismatch in bytes 0-{len(data) - 1}"):
            ckpt.verify_files(path, meta)
    file.write_bytes(data + b"x")
    with pytest.raises(CheckpointCorrupt, match=f"{len(data) + 1} bytes, but 1 region checksums were recorded"):
        checksums.verify_regions(file, {"region_bytes": len(data), "crc32": [zlib.crc32(data)]})


def test_clean_stale_removes_what_a_killed_writer_left(tmp_path: Path) -> None:
    """A writer killed mid-save leaves `.tmp-step-*`, or a `.latest.PID` pointer not yet renamed."""
    (tmp_path / ".tmp-step-00000008").mkdir()
    (tmp_path / ".tmp-step-00000008" / "state.pt").write_bytes(b"half")
    (tmp_path / ".latest.4242").write_text("step-00000008\n")
    (tmp_path / "step-00000004").mkdir()
    (tmp_path / "latest").write_text("step-00000004\n")
    ckpt.clean_stale(tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["latest", "step-00000004"]

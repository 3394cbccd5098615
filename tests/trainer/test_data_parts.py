"""The cache's per-part digests (trainer/s3_digests.py): zlib's crc32_combine against zlib.crc32 of the whole;
the writer s3transfer fills, given parts out of order, a retried part and a gap, against hashlib of the file; and,
against moto's server over HTTP, a multi-part object staged with a CRC32 per part (each S3 check: full-object
CRC32 from the parts' CRCs combined, SHA256 and MD5 in order), a flipped byte in any part caught at use naming
the part, and entries written with earlier records (a sha256 per part; the whole file's sha256) still verifying."""

from __future__ import annotations

import base64
import hashlib
import itertools
import json
import os
import random
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from s3_server import S3Server, s3_server  # tests/support
from trainer import s3_digests
from trainer.launcher import data_cache

BUCKET = "parts-bucket"
PART = s3_digests.PART
BODY = os.urandom(2 * PART + 3 * (1 << 20) + 12345)  # three parts, the last short and odd


def test_crc32_combine_is_zlibs_crc32_of_the_concatenation() -> None:
    rng = random.Random(35)
    sizes = [0, 1, 2, 3, 7, 255, 4096, 65537, 1 << 20, (1 << 20) + 1] + [rng.randrange(0, 300_000) for _ in range(40)]
    for size_a in sizes[::3]:
        for size_b in sizes:
            a, b = rng.randbytes(size_a), rng.randbytes(size_b)
            combined = s3_digests.crc32_combine(zlib.crc32(a), zlib.crc32(b), len(b))
            assert combined == zlib.crc32(a + b), (size_a, size_b)
    parts = [rng.randbytes(rng.randrange(0, 5000)) for _ in range(25)] + [b""]
    crc = 0
    for part in parts:
        crc = s3_digests.crc32_combine(crc, zlib.crc32(part), len(part))
    assert crc == zlib.crc32(b"".join(parts))


def _write(writer: s3_digests.PartWriter, offset: int, data: bytes) -> None:
    writer.seek(offset)
    writer.write(data)


@pytest.mark.parametrize("wanted", [{"CRC32"}, {"SHA256"}, {"md5"}, set()])
def test_parts_written_out_of_order_retried_or_with_a_gap_digest_as_the_file(tmp_path: Path, wanted: set[str]) -> None:
    """As s3transfer writes: each part's chunks in order, the parts interleaved; part 2's GET retried from its
    first byte after half of it; part 3 with a chunk written last (a gap: that part is digested from the file);
    then part 1's first chunk written again (bytes digested in order written again: so is the whole)."""
    dest = tmp_path / "obj"
    chunk = 1 << 20
    skipped = 2 * PART + chunk
    with dest.open("wb") as fh:
        writer = s3_digests.PartWriter(fh, dest, len(BODY), wanted)
        try:
            starts = [range(i * PART, min(len(BODY), (i + 1) * PART), chunk) for i in range(3)]
            for offset in starts[1][:4]:  # part 2's first try, cut halfway
                _write(writer, offset, BODY[offset : offset + chunk])
            for row in itertools.zip_longest(*starts):
                for offset in row:
                    if offset is not None and offset != skipped:
                        _write(writer, offset, BODY[offset : min(offset + chunk, (offset // PART + 1) * PART)])
            _write(writer, skipped, BODY[skipped : skipped + chunk])
            _write(writer, 0, BODY[:chunk])
        finally:
            writer.close()
        fetched = writer.result()
    assert dest.read_bytes() == BODY
    assert fetched.parts == _crcs(BODY)
    whole = s3_digests.file_digests(dest)
    assert fetched.checks == {k: whole[k] for k in fetched.checks} and set(fetched.checks) >= wanted


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Iterator[S3Server]:
    with s3_server(tmp_path_factory.mktemp("moto")) as server:
        s3: Any = server.client()
        s3.create_bucket(Bucket=BUCKET)
        s3.put_object(Bucket=BUCKET, Key="crc/big.bin", Body=BODY, ChecksumAlgorithm="CRC32")
        s3.put_object(Bucket=BUCKET, Key="sha/big.bin", Body=BODY, ChecksumAlgorithm="SHA256")
        s3.put_object(Bucket=BUCKET, Key="md5/big.bin", Body=BODY)
        yield server


def _crcs(body: bytes) -> list[str]:
    return [f"{zlib.crc32(body[i : i + PART]):08x}" for i in range(0, len(body), PART)]


def _manifest(entry: Path) -> dict[str, Any]:
    return dict(json.loads((entry / data_cache.MANIFEST).read_text()))


@pytest.mark.parametrize("kind", ["crc", "sha", "md5"])
def test_a_multi_part_object_is_staged_with_a_crc32_per_part(aws_env: S3Server, tmp_path: Path, kind: str) -> None:
    uri = f"s3://{BUCKET}/{kind}/big.bin"
    staged = data_cache.stage(uri, tmp_path / "cache", lambda _: None)
    assert staged.fetched and staged.path.read_bytes() == BODY
    (want,) = _manifest(staged.entry)["files"].values()
    assert want["part_size"] == PART and "sha256" not in want and "sha256_parts" not in want
    assert want["crc32_parts"] == _crcs(BODY)
    assert data_cache.check_entry(staged.entry) is None
    again = data_cache.stage(uri, tmp_path / "cache", lambda _: None)
    assert not again.fetched and aws_env.gets(f"/{BUCKET}/{kind}/big.bin") >= 3


def test_the_crc32_s3_gives_is_the_parts_crcs_combined(aws_env: S3Server) -> None:
    from trainer import s3_objects

    (obj,) = s3_objects.objects(aws_env.client(), s3_objects.parse(f"s3://{BUCKET}/crc/big.bin"))
    assert obj.checksum == ("CRC32", base64.b64encode(zlib.crc32(BODY).to_bytes(4, "big")).decode())
    assert s3_objects.needed(obj) == {"CRC32"}


@pytest.mark.parametrize("part", [0, 1, 2])
def test_a_flipped_byte_in_any_part_is_caught_at_use_naming_the_part(
    aws_env: S3Server, tmp_path: Path, part: int
) -> None:
    uri = f"s3://{BUCKET}/crc/big.bin"
    lines: list[str] = []
    first = data_cache.stage(uri, tmp_path / "cache", lines.append)
    at = part * PART + 4321
    with first.path.open("r+b") as f:
        f.seek(at)
        byte = f.read(1)
        f.seek(at)
        f.write(bytes([byte[0] ^ 0x01]))
    start, end = part * PART, min(len(BODY), (part + 1) * PART) - 1
    assert data_cache.check_entry(first.entry) is not None
    again = data_cache.stage(uri, tmp_path / "cache", lines.append)
    assert again.fetched and again.path.read_bytes() == BODY
    assert any(f"is corrupt (big.bin part {part + 1} (bytes {start}-{end}) has crc32" in line for line in lines)


def test_an_entry_with_a_sha256_per_part_still_verifies(aws_env: S3Server, tmp_path: Path) -> None:
    """A manifest as written before the CRC32 record: `part_size` and `sha256_parts`; a flipped byte named."""
    uri = f"s3://{BUCKET}/crc/big.bin"
    staged = data_cache.stage(uri, tmp_path / "cache", lambda _: None)
    manifest = _manifest(staged.entry)
    for want in manifest["files"].values():
        del want["crc32_parts"]
        want["sha256_parts"] = [hashlib.sha256(BODY[i : i + PART]).hexdigest() for i in range(0, len(BODY), PART)]
    (staged.entry / data_cache.MANIFEST).write_text(json.dumps(manifest))
    assert data_cache.check_entry(staged.entry) is None
    assert not data_cache.stage(uri, tmp_path / "cache", lambda _: None).fetched
    with staged.path.open("r+b") as f:
        f.seek(PART + 7)
        byte = f.read(1)
        f.seek(PART + 7)
        f.write(bytes([byte[0] ^ 0x02]))
    assert (data_cache.check_entry(staged.entry) or "").startswith(f"big.bin part 2 (bytes {PART}-")
    assert "has sha256 " in (data_cache.check_entry(staged.entry) or "")


def test_an_entry_with_the_whole_files_sha256_still_verifies(aws_env: S3Server, tmp_path: Path) -> None:
    """A manifest as written before parts were recorded: `size` and the whole file's `sha256`."""
    uri = f"s3://{BUCKET}/md5/big.bin"
    staged = data_cache.stage(uri, tmp_path / "cache", lambda _: None)
    manifest = _manifest(staged.entry)
    for want in manifest["files"].values():
        del want["part_size"], want["crc32_parts"]
        want["sha256"] = hashlib.sha256(BODY).hexdigest()
    (staged.entry / data_cache.MANIFEST).write_text(json.dumps(manifest))
    assert data_cache.check_entry(staged.entry) is None
    assert not data_cache.stage(uri, tmp_path / "cache", lambda _: None).fetched
    with staged.path.open("r+b") as f:
        f.seek(len(BODY) - 1)
        last = f.read(1)
        f.seek(len(BODY) - 1)
        f.write(bytes([last[0] ^ 0x80]))
    assert (data_cache.check_entry(staged.entry) or "").startswith("big.bin has sha256 ")


def test_a_manifest_with_no_part_size_is_a_corrupt_entry(aws_env: S3Server, tmp_path: Path) -> None:
    uri = f"s3://{BUCKET}/crc/big.bin"
    staged = data_cache.stage(uri, tmp_path / "cache", lambda _: None)
    manifest = _manifest(staged.entry)
    for part_size in (0, None):
        for want in manifest["files"].values():
            want["part_size"] = part_size
        (staged.entry / data_cache.MANIFEST).write_text(json.dumps(manifest))
        assert (data_cache.check_entry(staged.entry) or "").startswith("its manifest cannot be read")
    assert data_cache.stage(uri, tmp_path / "cache", lambda _: None).fetched

"""Validation data streamed from S3 (`data.val` with `mode: stream`, trainer/data/loader.py's StreamedVal), against
moto's server over HTTP, on 3 gloo ranks started by torchrun: with shares of uneven record counts, every rank runs
the same number of forward passes (FSDP's collectives inside the forward line up), the metrics equal the map-style
evaluation's of the same file, and a label the model cannot output is named by its URI and byte offset."""

from __future__ import annotations

import json
import random
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from s3_server import S3Server, s3_server  # tests/support

from .conftest import clean_env

BUCKET = "val-stream"
WORKER = """
import gc, json, sys
from pathlib import Path
import torch, torch.distributed as dist
from torch import nn
from trainer.data.jsonl import read_examples
from trainer.data.loader import StreamedVal
from trainer.errors import TrainerInputError
from trainer.training.evaluate import Evaluator

uri, local, out = sys.argv[1:4]
dist.init_process_group("gloo")
rank, world, cpu = dist.get_rank(), dist.get_world_size(), torch.device("cpu")
torch.manual_seed(0)
model = nn.Linear(4, 3)
calls = [0]
model.register_forward_hook(lambda *_: calls.__setitem__(0, calls[0] + 1))
mapped = read_examples([Path(local)], "classification", "val_data")
val = StreamedVal(uri, "classification", 8, rank, world, cpu)
val.classes = (3, "linear")
said = {"share": sum(1 for _ in val.reader.lines_from()), "batches_each": val.batches_each}
try:
    said["streamed"] = Evaluator(val, "classification", 8, "fp32", rank, world, cpu, (mapped.x[:1], mapped.y[:1]))(model)
except TrainerInputError as exc:
    said["error"] = str(exc)
said["forwards"] = calls[0]
if "error" not in said:
    said["mapped"] = Evaluator(mapped, "classification", 8, "fp32", rank, world, cpu, (mapped.x[:1], mapped.y[:1]))(model)
Path(out, f"rank-{rank}.json").write_text(json.dumps(said))
del model, val  # torch 2.13 can abort at exit with a process group still up: free, agree, then destroy
gc.collect()
dist.barrier()
dist.destroy_process_group()
"""


def _jsonl(lines: int, bad_at: int | None = None) -> bytes:
    """Records whose first third carry a long `note`: the ranks' equal byte shares hold uneven record counts."""
    rng = random.Random(lines)
    rows = [{"x": [rng.random() for _ in range(4)], "y": 7 if i == bad_at else rng.randint(0, 2),
             "note": "n" * (300 if i < lines // 3 else 0)} for i in range(lines)]  # fmt: skip
    return "".join(json.dumps(r) + "\n" for r in rows).encode()


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Iterator[S3Server]:
    with s3_server(tmp_path_factory.mktemp("moto"), buckets=(BUCKET,)) as server:
        yield server


def _evaluate(store: S3Server, tmp_path: Path, body: bytes, ranks: int) -> list[dict[str, object]]:
    """Put `body` at s3://BUCKET/val.jsonl and beside it on disk, run WORKER on `ranks` ranks; each rank's JSON."""
    store.client().put_object(Bucket=BUCKET, Key="val.jsonl", Body=body)  # type: ignore[attr-defined]
    local, script = tmp_path / "val.jsonl", tmp_path / "worker.py"
    local.write_bytes(body)
    script.write_text(WORKER)
    argv = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={ranks}", str(script)]
    done = subprocess.run(
        [*argv, f"s3://{BUCKET}/val.jsonl", str(local), str(tmp_path)],
        env=clean_env(tmp_path, **store.env()), capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return [json.loads((tmp_path / f"rank-{r}.json").read_text()) for r in range(ranks)]


def test_uneven_shares_run_equal_forward_passes_and_give_the_map_style_metrics(store: S3Server, tmp_path: Path) -> None:
    said = _evaluate(store, tmp_path, _jsonl(101), ranks=3)
    shares = [int(str(r["share"])) for r in said]
    assert sum(shares) == 101 and len(set(shares)) > 1, shares  # every record once, on uneven shares
    assert len({r["forwards"] for r in said}) == 1 and said[0]["forwards"] == said[0]["batches_each"], said
    assert said[0]["batches_each"] == -(-max(shares) // 8)
    for r in said:
        streamed, mapped = r["streamed"], r["mapped"]
        assert isinstance(streamed, dict) and isinstance(mapped, dict)
        assert streamed["val_loss"] == pytest.approx(mapped["val_loss"], rel=1e-6)
        assert streamed["val_accuracy"] == pytest.approx(mapped["val_accuracy"], rel=1e-9)


def test_a_label_the_model_cannot_output_is_named_by_uri_and_byte(store: S3Server, tmp_path: Path) -> None:
    """Streamed validation records are not read up front, so the labels are checked as each batch is read."""
    body = _jsonl(40, bad_at=30)
    said = _evaluate(store, tmp_path, body, ranks=1)[0]
    at = sum(len(line) + 1 for line in body.split(b"\n")[:30])
    assert said["error"] == f"s3://{BUCKET}/val.jsonl at byte {at}: label 7, but model 'linear' has 3 classes", said

"""A hang on a GPU: the step stops inside DDP's gradient all-reduce (the `allreduce` failpoint's `hang`,
in the comm hook, before this rank joins the NCCL all-reduce). The watchdog declares it within
`hang_timeout`, the run exits 200 with failure.json, and torch's NCCL flight recorder dump lands in the
output folder and agrees with the watchdog's count of collectives.

What one GPU cannot show: a rank stopped while *other* ranks wait inside an NCCL collective needs a GPU
per rank (NCCL refuses two ranks on one device); tests/reliability/test_hangs.py drives that shape on
gloo. Here the world is one rank, so what this proves is the CUDA side: detection while the main
thread is stuck in the backward pass, the NCCL recorder's dump (`_dump_nccl_trace`) and where it goes.
"""

from __future__ import annotations

import json
import pickle
from pathlib import Path

from trainer.exit_codes import EXIT_HANG

from .conftest import GPUS, digits_args, gpu, gpu_env, launcher, run

pytestmark = gpu
HANG_TIMEOUT_S = 10


def test_hang_in_the_allreduce_is_reported_with_the_nccl_flight_recorder(digits: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    args = digits_args(digits, out, "--backend", "nccl", "--epochs", "20", "--hang-timeout", str(HANG_TIMEOUT_S),
                       "--timeout-s", "300")  # fmt: skip
    # TRAINER_OUTPUT_DIR: the launcher puts the recorder's dumps under it (trainer/launcher/flight_recorder.py)
    env = gpu_env(tmp_path, TRAINER_FAILPOINTS="allreduce@0=30*off->hang", TRAINER_OUTPUT_DIR=str(out))
    proc = run(launcher(*args), env, timeout=240)
    assert proc.returncode == EXIT_HANG, proc.stderr[-4000:]
    record = json.loads((out / "failure.json").read_text())
    assert record["kind"] == "hang" and record["step"] == 30 and record["hang_timeout_s"] == HANG_TIMEOUT_S, record
    assert record["stalled_s"] <= HANG_TIMEOUT_S + 15, record
    assert "failpoint allreduce (rank 0, hit 31): hang" in proc.stderr
    collectives = {r["rank"]: r["collectives"] for r in record["ranks"]}
    for rank in range(GPUS):
        dump = pickle.loads((out / "flight_recorder" / f"rank_{rank}").read_bytes())
        entries = dump["entries"]
        assert entries and all(e["profiling_name"].startswith("nccl:") for e in entries), entries[-1:]
        assert max(e["collective_seq_id"] for e in entries) == collectives[rank], (entries[-1], collectives)

"""The collectives' flight recorder for the workers the launcher starts: on unless the job set it itself,
its dumps in the run's output folder (which only the launcher knows, so the Dockerfile cannot set it)."""

from __future__ import annotations

from pathlib import Path

from .. import records

FLIGHT_RECORDER_ENV = {"TORCH_FR_BUFFER_SIZE": "2000", "TORCH_NCCL_DUMP_ON_TIMEOUT": "1"}
"""The collectives' flight recorder, on for every worker unless the job sets these itself. torch's
ProcessGroupNCCL variables (docs.pytorch.org/docs/stable/torch_nccl_environment_variables.html):
TORCH_NCCL_TRACE_BUFFER_SIZE, "the maximum number of events we store in the flight recorder's ring
buffer", and TORCH_NCCL_DUMP_ON_TIMEOUT, dump it "on watchdog timeout or exception", which "must be
set together with TORCH_NCCL_TRACE_BUFFER_SIZE larger than 0". torch 2.13 reads the buffer size as
TORCH_FR_BUFFER_SIZE (it warns that the NCCL name is deprecated) and the dump file prefix as
TORCH_FR_DUMP_TEMP_FILE, for gloo's collectives too; torchtitan sets the same three
(torchtitan/distributed/utils.py, `init_distributed`)."""


def worker_env(env: dict[str, str]) -> dict[str, str]:
    """What to add to the workers' environment: the recorder, and its dump files in
    `$TRAINER_OUTPUT_DIR/flight_recorder/rank_<R>` (`fr_trace` reads that folder)."""
    out = {k: v for k, v in FLIGHT_RECORDER_ENV.items() if k not in env}
    if env.get("TRAINER_OUTPUT_DIR") and "TORCH_FR_DUMP_TEMP_FILE" not in env:
        out["TORCH_FR_DUMP_TEMP_FILE"] = str(Path(env["TRAINER_OUTPUT_DIR"]) / records.FLIGHT_RECORDER / "rank_")
    return out

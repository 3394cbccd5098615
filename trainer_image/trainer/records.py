"""What a run leaves in its output folder about how it went wrong: machine-readable, one file each.

    failure.json     why the last attempt ended, when it was the trainer's or the launcher's verdict:
                     {"kind": "hang" | "slow_node", "source": "trainer" | "launcher", "step", "time",
                      "exit_code", "suspects": [{"node", "rank", "heartbeat_age_s", "why"}], ...}
    slow_nodes.json  every node the straggler check flagged in this run:
                     {"factor", "window", "step", "time", "nodes": [{"node", "rank", "ratio", ...}]}

`suspects[].node` is what a retry leaves out (docs/contracts.md section 2 has the fields); the SDK
reads these files per target (`trainctl status`: `slow_nodes`, `failure`). Both are written whole
and renamed into place, so a reader never sees half a file.
"""

from __future__ import annotations

import contextlib
import json
import os
import time
from pathlib import Path
from typing import Any

FAILURE = "failure.json"
SLOW_NODES = "slow_nodes.json"
FLIGHT_RECORDER = "flight_recorder"
"""Subfolder of the output folder for the collectives' flight-recorder dumps (`rank_<R>`, pickles that
`python -m torch.distributed.flight_recorder.fr_trace FOLDER` reads)."""


def stamp() -> dict[str, Any]:
    now = time.time()
    return {"time": round(now, 3), "time_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(now))}


def write_json(path: Path, data: dict[str, Any], replace: bool = True) -> bool:
    """Write `data` to `path` atomically; with `replace=False` only if no file is there yet. Whether it
    was written (an output folder that cannot be written to is said in the log, not raised)."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        tmp.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n")
        if replace:
            os.replace(tmp, path)
            return True
        try:
            os.link(tmp, path)  # fails when a file is already there: the first verdict stays
            return True
        except FileExistsError:
            return False
        finally:
            tmp.unlink(missing_ok=True)
    except OSError:
        return False


def read_json(path: Path) -> dict[str, Any] | None:
    with contextlib.suppress(OSError, ValueError):
        data = json.loads(path.read_text())
        return data if isinstance(data, dict) else None
    return None

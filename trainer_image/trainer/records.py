"""What a run leaves in its output folder about how it went wrong: machine-readable, one file each.

    failure.json     why the last attempt ended, when it was the trainer's or the launcher's verdict:
                     {"kind": "hang" | "slow_node", "source": "trainer" | "launcher", "step", "time",
                      "exit_code", "suspects": [{"node", "rank", "heartbeat_age_s", "why"}], ...}, or the
                     program's error: {"kind": "error", "rank", "node", "exception", "message", "log_tail",
                      "failed_at", ...} (first_failure.py)
    verdict.txt      the same verdict for the SLURM batch script, which reads it with sed (no Python on the
                     host): `kind=hang` and `nodes=n2,n3` (the suspects' nodes, in order, each once)
    slow_nodes.json  every node the straggler check flagged in this run:
                     {"factor", "window", "step", "time", "nodes": [{"node", "rank", "ratio", ...}]}

On Kubernetes the same verdict also goes, compact, to the container's termination message (the file
`$TRAINCTL_TERMINATION_LOG`, which the pod sets to /dev/termination-log): the kubelet copies that file
into the pod's `status.containerStatuses[].state.terminated.message`, the one channel by which trainctl,
outside the cluster, learns what the trainer said without reading the PVC.

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
VERDICT = "verdict.txt"
SLOW_NODES = "slow_nodes.json"
TERMINATION_LOG_ENV = "TRAINCTL_TERMINATION_LOG"
TERMINATION_LIMIT = 4096
"""kubelet reads at most the last 4096 bytes of a termination message file (pkg/kubelet/container/runtime.go
MaxContainerTerminationMessageLength): a longer record would lose its head and no longer parse."""
_COMPACT = ("kind", "source", "time", "step", "exit_code", "checkpoint", "rank", "node", "signal", "exception",
            "failed_at")  # fmt: skip
_MESSAGE_LIMIT = 1024
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


def write_failure(output_dir: Path | None, record: dict[str, Any], replace: bool = True) -> bool:
    """failure.json in the output folder (see `write_json` for `replace`), and, when this rank's verdict is
    the one that stands, the compact record as the container's termination message. Whether failure.json
    was written (no output folder: the termination message alone)."""
    written = write_json(output_dir / FAILURE, record, replace) if output_dir is not None else True
    if written:
        write_termination_message(record)
        if output_dir is not None:
            write_verdict(output_dir, record)
    return written


def verdict_text(record: dict[str, Any]) -> str:
    """`kind=...` and `nodes=...` lines: what the SLURM batch script needs of a failure record, plainly."""
    nodes = [s.get("node") for s in record.get("suspects") or [] if isinstance(s, dict)]
    named = [n for n in dict.fromkeys(nodes) if isinstance(n, str) and n and "," not in n and "\n" not in n]
    kind = str(record.get("kind") or "").split("\n")[0]
    return f"kind={kind}\nnodes={','.join(named)}\n"


def write_verdict(output_dir: Path, record: dict[str, Any]) -> None:
    """verdict.txt beside failure.json, written whole and renamed into place like it."""
    with contextlib.suppress(OSError):
        tmp = output_dir / f".{VERDICT}.{os.getpid()}.tmp"
        tmp.write_text(verdict_text(record))
        os.replace(tmp, output_dir / VERDICT)


def compact(record: dict[str, Any], limit: int = TERMINATION_LIMIT) -> str:
    """The record's verdict in at most `limit` bytes of JSON: kind, step, exit code and each suspect's node,
    rank and heartbeat age; of an error, its rank, node, exception, message (cut at 1 KiB) and last lines.
    The oldest last lines go first, then suspects from the end (counted), until it fits."""
    head = {k: record[k] for k in _COMPACT if record.get(k) is not None}
    if isinstance(record.get("message"), str):
        head["message"] = record["message"][:_MESSAGE_LIMIT]
    suspects = [{k: s[k] for k in ("node", "rank", "heartbeat_age_s") if isinstance(s, dict) and k in s}
                for s in record.get("suspects") or []]  # fmt: skip
    tail = [str(line)[:_MESSAGE_LIMIT] for line in record.get("log_tail") or []]
    kept = len(suspects)
    while True:
        body = {**head, "suspects": suspects[:kept], "suspects_left_out": len(suspects) - kept}
        text = json.dumps({**body, "log_tail": tail} if tail else body, separators=(",", ":"), sort_keys=True)
        if len(text.encode()) <= limit or (kept == 0 and not tail):
            return text
        if tail:
            tail.pop(0)
        else:
            kept -= 1


def write_termination_message(record: dict[str, Any]) -> None:
    """The compact record into `$TRAINCTL_TERMINATION_LOG` (unset: not on Kubernetes, nothing to do)."""
    path = os.environ.get(TERMINATION_LOG_ENV)
    if path:
        with contextlib.suppress(OSError):
            Path(path).write_text(compact(record))

"""Which rank failed first, on which node, with what error, and its last lines: the launcher's error record.

torchrun's own mechanism is the source (torch/distributed/elastic/multiprocessing/errors/__init__.py): a
worker that fails writes `TORCHELASTIC_ERROR_FILE` (`ErrorHandler.record_exception`, error_handler.py, as
`@record` does), and the agent raises `ChildFailedError`, whose `failures` hold each failed rank's
`ProcessFailure` (exit code, error-file data) and whose `get_first_failure` is the "Root Cause (first
observed failure)" of its report. The built-in trainer records its error itself (train.py); a Python
`command:` program records it through the excepthook in `site/sitecustomize.py`, which the launcher puts
on the workers' PYTHONPATH. A program that writes no error file (a shell script, a signal) is described
by its exit code and its last output lines.

`get_first_failure` orders by the error file's timestamp, in whole seconds: a rank whose peer died raises
in the same second, so here the order is by when each rank's error file was written (its mtime, to the
nanosecond), else when its output ended, and torch's timestamp last.

The record is failure.json's `kind: "error"` (records.py), written like the hang verdict: the output
folder (local, SLURM), the container's termination message (Kubernetes), and as text `/opt/ml/output/failure`
on SageMaker, whose FailureReason carries it (`text`, parsed back by the SDK's sagemaker/causes.py).
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from . import records

TAIL_LINES = 20
"""The failing rank's last output lines kept in its record."""
STOPPED = (128 + signal.SIGTERM, 128 + signal.SIGINT)
"""A worker ended by SIGTERM or SIGINT was stopped (a cancel, max_runtime, a preemption): no error of its own."""
SITE_DIR = str(Path(__file__).with_name("site"))
"""The folder with the workers' sitecustomize (a Python program's uncaught exception into the error file)."""
_EXCEPTION = re.compile(r"^([A-Za-z_][\w.]*(?:Error|Exception|Exit|Interrupt|Warning|Failure|Fault))(?::\s?(.*))?$")
_ANY_TYPE = re.compile(r"^([A-Za-z_][\w.]*)(?::\s?(.*))?$", re.DOTALL)


def _split(text: str, any_type: bool = False) -> tuple[str | None, str]:
    """`RuntimeError: boom` -> ("RuntimeError", "boom"); a line that names no exception -> (None, line).
    `any_type`: the text is an error file's `{type}: {message}`, so any name before the colon is the type."""
    match = (_ANY_TYPE if any_type else _EXCEPTION).match(text.strip())
    if match is None:
        return None, text.strip()
    return match.group(1), (match.group(2) or "").strip()


def from_tail(lines: list[str]) -> tuple[str | None, str | None]:
    """The exception a Python traceback in the last lines ends with (a program that wrote no error file)."""
    seen = False
    found: tuple[str | None, str | None] = (None, None)
    for line in lines:
        if line.startswith("Traceback (most recent call last)"):
            seen, found = True, (None, None)
        elif seen and not line.startswith((" ", "\t")) and found[0] is None:
            kind, message = _split(line)
            if kind is not None:
                found = (kind, message)
    return found


def _written_at(failure: Any, ended: dict[int, float], rank: int) -> float:
    with contextlib.suppress(OSError, TypeError, ValueError):
        return os.stat(failure.error_file).st_mtime_ns / 1e9
    return ended.get(rank, float(failure.timestamp))


def _stopped(failure: Any) -> bool:
    """Whether the worker was ended by SIGTERM or SIGINT: torchrun's `close` stops the survivors of a failure
    that way, so such a rank is a consequence whenever another rank failed by itself."""
    return int(failure.exitcode) in (-signal.SIGTERM, -signal.SIGINT, *STOPPED)


def first(failures: dict[int, Any], ended: dict[int, float]) -> int:
    """The global rank that failed first, of a ChildFailedError's `failures` (see the module's note); a rank
    torchrun stopped comes after every rank that failed by itself. Its time alone does not say so under load:
    with no error file and its output's end not yet read, it is torch's timestamp, in whole seconds, and once
    put the stopped rank 0 before rank 1, whose exception had ended the attempt (exit 143, not 1)."""
    return min(failures, key=lambda r: (_stopped(failures[r]), _written_at(failures[r], ended, r), r))


def record(failures: dict[int, Any], ended: dict[int, float], tails: dict[int, list[str]], node: str) -> dict[str, Any]:
    """failure.json's `kind: "error"` from a ChildFailedError's failures on this node."""
    rank = first(failures, ended)
    failure = failures[rank]
    tail = tails.get(rank, [])[-TAIL_LINES:]
    message = failure.message if isinstance(failure.message, dict) else {"message": failure.message}
    said = str(message.get("message") or "")
    wrote = failure.error_file not in ("", os.devnull, "<N/A>")  # torch's _NOT_AVAILABLE: no error file
    kind, text = _split(said, any_type=True) if wrote else from_tail(tail)
    code = failure.exitcode
    return {
        "kind": "error", "source": "launcher", **records.stamp(), "failed_at": round(_written_at(failure, ended, rank), 3),
        "rank": rank, "local_rank": failure.local_rank, "node": node,
        "exit_code": code if code >= 0 else 128 - code, "signal": failure.signal_name() if code < 0 else None,
        "exception": kind, "message": text, "log_tail": tail, "ranks_failed": sorted(failures),
    }  # fmt: skip


def headline(rec: dict[str, Any]) -> str:
    """`rank 1 on n1 failed (exit 1): RuntimeError: boom on rank 1 at epoch 2`: one line for every target."""
    how = f"signal {rec['signal']}" if rec.get("signal") else f"exit {rec.get('exit_code')}"
    said = "".join(
        f": {str(rec[k]).splitlines()[0]}" for k in ("exception", "message") if str(rec.get(k) or "").strip()
    )
    return f"rank {rec.get('rank')} on {rec.get('node')} failed ({how}){said}"


def text(rec: dict[str, Any], limit: int = 1000) -> str:
    """The headline and the last lines, at most `limit` bytes: SageMaker's FailureReason is at most 1024
    characters (DescribeTrainingJob API reference), `AlgorithmError: ` and this file's text. The oldest lines
    are dropped first."""
    head = headline(rec)[: limit // 2]
    lines = list(rec.get("log_tail") or [])
    while lines:
        body = f"{head}\nlast lines of rank {rec.get('rank')}:\n" + "\n".join(lines)
        if len(body.encode()) <= limit:
            return body
        lines.pop(0)
    return head


def keep_earlier(path: Path, rec: dict[str, Any], started_at: float) -> bool:
    """Whether a failure.json already there, of this attempt, names an earlier failure (another node's)."""
    there = records.read_json(path)
    if not there or float(there.get("time") or 0) < started_at - 1.0:
        return False  # none, or an earlier attempt's
    if there.get("kind") != "error":
        return True  # this attempt's hang or slow-node verdict stands
    return float(there.get("failed_at") or 0) <= float(rec["failed_at"])


def report(output_dir: str | None, rec: dict[str, Any], started_at: float) -> None:
    """failure.json (unless an earlier failure of this attempt is there) and the termination message."""
    folder = Path(output_dir) if output_dir else None
    if folder is not None and keep_earlier(folder / records.FAILURE, rec, started_at):
        return
    records.write_failure(folder, rec)


def worker_pythonpath(env: Mapping[str, str]) -> str:
    """The workers' PYTHONPATH: the program's own, then the folder of the sitecustomize that records an exception."""
    return os.pathsep.join(p for p in (env.get("PYTHONPATH"), SITE_DIR) if p)


def launcher_failed(error: BaseException, exit_code: int) -> None:
    """failure.json (`kind: error`, `source: launcher`, no rank: no worker started) in TRAINER_OUTPUT_DIR, and the
    termination message, so `trainctl status` names what to fix (a URI, a program) on every target, as it names
    a rank's error."""
    output = os.environ.get("TRAINER_OUTPUT_DIR")
    rec = {**records.stamp(), "kind": "error", "source": "launcher", "node": scheduler_node(), "exit_code": exit_code,
           "exception": type(error).__name__, "message": str(error), "failed_at": time.time()}  # fmt: skip
    records.write_failure(Path(output) if output else None, rec)


def scheduler_node() -> str:
    """This node as its scheduler names it: a pod's node (TRAINCTL_NODE_NAME), SLURM's node (SLURMD_NODENAME:
    virtual nodes share one hostname), SageMaker's host (CURRENT_HOST, algo-N), else the hostname."""
    from .heartbeat import node_name

    if os.environ.get("TRAINCTL_NODE_NAME"):
        return node_name()
    return os.environ.get("SLURMD_NODENAME") or os.environ.get("CURRENT_HOST") or node_name()


def reported(
    failures: dict[int, Any], output_dir: str | None, started_at: float, say: Callable[[str], None]
) -> dict[str, Any]:
    """The record of a ChildFailedError's failures on this node, reported and said (the launcher, after torchrun)."""
    from . import worker_output

    worker_output.drain()  # the failing rank's last lines
    tails = {rank: list(lines) for rank, lines in worker_output.TAILS.items()}
    rec = record(failures, dict(worker_output.ENDED), tails, scheduler_node())
    if rec["exit_code"] not in STOPPED:
        report(output_dir, rec, started_at)
        say(headline(rec))
    return rec


def worker_record(exc: BaseException) -> None:
    """torch's error file for this worker's exception (`ErrorHandler.record_exception`, what `@record` does),
    for a program that handles its own exceptions and exits with a code (the built-in trainer)."""
    if not os.environ.get("TORCHELASTIC_ERROR_FILE"):
        return
    with contextlib.suppress(Exception):
        from torch.distributed.elastic.multiprocessing.errors import get_error_handler

        try:
            raise exc
        except BaseException as raised:  # inside an except block, so its traceback is the one written
            get_error_handler().record_exception(raised)

"""Many runs' progress and metric files in one call to the cluster (per login host, per CHUNK runs), where
engine.py's `progress` and `metrics` make one call per run: `sweep status` over 64 running trials made 192
(docs/scale.md "Sweeps"). One `sh -c` script reads each run's file in turn and prints a line holding a
random mark before each, so the answers are told apart whatever the files hold.
"""

from __future__ import annotations

import posixpath
import secrets
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from ...runs import outputs
from ...runs import progress as progress_of
from ...runs.curves import from_log
from ...runs.state import Progress, RunRef
from .handle import SlurmHandle
from .shell import Shell

CHUNK = 100  # runs per call: a remote shell gets the command as one string, and one string is capped (128 KiB)
T = TypeVar("T")

# the same reads as engine.py's, per run: progress.json, else the log's last progress line; a file that is not
# there yet (a trial just started) costs no process
_PROGRESS_SH = (
    'mark=$1 line=$2 bytes=$3; shift 3; while [ "$#" -gt 1 ]; do printf "\\n%s\\n" "$mark"; '
    'if [ -r "$1" ]; then cat -- "$1"; elif [ -r "$2" ]; then '
    'tail -c "$bytes" -- "$2" | grep -a -F -- "$line" | tail -n 1; fi; shift 2; done'
)
# metrics.jsonl (M), else the log (L), else nothing
_METRICS_SH = (
    'mark=$1; shift; while [ "$#" -gt 1 ]; do printf "\\n%s\\n" "$mark"; '
    'if [ -r "$1" ]; then echo M; cat -- "$1"; elif [ -r "$2" ]; then echo L; cat -- "$2"; fi; '
    "shift 2; done"
)


def _each(runs: Sequence[RunRef], script: str, fixed: Sequence[str], pair: Callable[[RunRef], tuple[str, str]],
          parse: Callable[[str], T]) -> dict[str, T]:  # fmt: skip
    """{run id: parse(what the script printed for it)}, one `sh -c script` per login host and CHUNK runs; a run
    whose call failed is left out."""
    by_host: dict[tuple[str, ...], list[RunRef]] = {}
    for run in runs:
        by_host.setdefault(SlurmHandle.of(run).prefix, []).append(run)
    found: dict[str, T] = {}
    for prefix, group in by_host.items():
        for start in range(0, len(group), CHUNK):
            chunk, mark = group[start : start + CHUNK], f"--trainctl-{secrets.token_hex(16)}--"
            args = [arg for run in chunk for arg in pair(run)]
            done = Shell(prefix=prefix).run(["sh", "-c", script, "sh", mark, *fixed, *args], timeout=60)
            parts = done.stdout.decode(errors="replace").split(f"\n{mark}\n")
            if len(parts) != len(chunk) + 1:  # the shell stopped early: trust none of its answers
                continue
            found.update({run.id: parse(text) for run, text in zip(chunk, parts[1:], strict=True)})
    return found


def progress_in(text: str) -> Progress | None:
    """What the progress script printed for one run: progress.json (read as runs/outputs.py reads it), else the
    log's last progress line."""
    text = text.strip()
    found = outputs.progress(lambda _: text.encode()) if text.startswith("{") else None
    return found or progress_of.from_line(text)


def progress_many(runs: Sequence[RunRef]) -> dict[str, Progress | None]:
    """engine.progress of every run that has a folder or a log, in one call per host and CHUNK runs."""
    readable = [run for run in runs if run.paths.output_dir or run.paths.log]
    fixed = (progress_of.LINE_MARK, str(progress_of.TAIL_BYTES))
    return _each(readable, _PROGRESS_SH, fixed, _progress_files, progress_in)


def _progress_files(run: RunRef) -> tuple[str, str]:
    folder = run.paths.output_dir or "/nonexistent"
    return posixpath.join(folder, progress_of.FILE_NAME), run.paths.log or "/dev/null"


def _metrics(text: str) -> list[dict[str, Any]]:
    kind, _, body = text.partition("\n")
    if kind == "M":
        return outputs.metrics(lambda _: body.encode()) or []
    return from_log(body.splitlines()) if kind == "L" else []


def metrics_many(runs: Sequence[RunRef]) -> dict[str, list[dict[str, Any]]]:
    """The metric rows of every run with a recorded log (Target.metrics: metrics.jsonl, else the log; [] when
    neither can be read), in one call per host and CHUNK runs. A run without a recorded log is left out: its
    log's path is SLURM's to tell (engine.logs), one run at a time."""
    logged = [run for run in runs if run.paths.log]
    return _each(logged, _METRICS_SH, (), _metrics_files, _metrics)


def _metrics_files(run: RunRef) -> tuple[str, str]:
    folder = run.paths.output_dir or "/nonexistent"
    return posixpath.join(folder, "metrics.jsonl"), run.paths.log or ""

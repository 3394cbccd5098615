"""What every benchmark shares: paths, a figure record, robust statistics, side-by-side timing.

Every figure is the median of several repetitions with min and max, and every comparison is
measured in the same run with the repetitions interleaved (A B A B ...), so background load
hits both sides alike.
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
WORK = ROOT / "bench" / ".work"
VENV_BIN = Path(sys.executable).parent
PROBE = ROOT / "bench" / "probe"


@dataclass
class Figure:
    """One reported number: a median over `reps` with its min and max, and the target it is held to."""

    benchmark: str
    name: str
    median: float | None
    min: float | None = None
    max: float | None = None
    unit: str = ""
    target: str | None = None  # e.g. "<= 1.03"
    reps: int = 0
    note: str = ""
    detail: dict[str, Any] = field(default_factory=dict)
    right: bool = True
    """False where the run's verdict was wrong (a hang that named the wrong rank): then no time meets the target."""

    @property
    def meets(self) -> bool | None:
        if self.target is None or self.median is None:
            return None
        if not self.right:
            return False
        op, _, bound = self.target.partition(" ")
        value, limit = self.median, float(bound)
        return {"<=": value <= limit, "<": value < limit, ">=": value >= limit, ">": value > limit}[op]

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        del data["right"]  # `meets` says it
        data["meets"] = self.meets
        return data


def summary(values: Sequence[float]) -> tuple[float, float, float]:
    """(median, min, max)."""
    return statistics.median(values), min(values), max(values)


def figure(benchmark: str, name: str, values: Sequence[float], **kw: Any) -> Figure:
    med, lo, hi = summary(values)
    return Figure(benchmark, name, med, lo, hi, reps=len(values), **kw)


def unavailable(benchmark: str, name: str, why: str, target: str | None = None, unit: str = "") -> Figure:
    """A figure that could not be measured: no number, and the reason in `note`."""
    return Figure(benchmark, name, None, unit=unit, target=target, note=f"not available: {why}")


def interleaved(cases: dict[str, Callable[[], float]], reps: int, warmup: int = 1) -> dict[str, list[float]]:
    """Run each case `reps` times, round-robin, after `warmup` untimed rounds; each call returns its own figure."""
    for _ in range(warmup):
        for fn in cases.values():
            fn()
    out: dict[str, list[float]] = {name: [] for name in cases}
    for _ in range(reps):
        for name, fn in cases.items():
            out[name].append(fn())
    return out


def wall(argv: Sequence[str], env: dict[str, str] | None = None, cwd: Path | None = None) -> float:
    """Wall seconds of one command, which must succeed."""
    t0 = time.perf_counter()
    proc = subprocess.run(list(argv), env=env, cwd=cwd, capture_output=True, text=True)
    elapsed = time.perf_counter() - t0
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)} exited {proc.returncode}: {proc.stderr.strip()[-2000:]}")
    return elapsed


def base_env(**extra: str) -> dict[str, str]:
    """The environment benchmarks run commands in: ours, with the venv first on PATH and no thread oversubscription."""
    env = dict(os.environ)
    env["PATH"] = f"{VENV_BIN}{os.pathsep}{env.get('PATH', '')}"
    env.setdefault("OMP_NUM_THREADS", "1")
    env.update(extra)
    return env


def load_average() -> float:
    return os.getloadavg()[0]


def module_available(name: str) -> str | None:
    """None if `name` imports, else why not (a target whose module has not landed yet)."""
    import importlib

    try:
        importlib.import_module(name)
    except ImportError as exc:
        return f"{name} cannot be imported ({exc})"
    return None

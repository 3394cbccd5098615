"""Benchmark 5: the SDK at scale: rendering 1,000 distinct jobs for every target, and `trainctl
list` over registries of 10,000 and 100,000 runs.

Rendering is timed in-process (Job objects built first, then `job.render(target)` for all
1,000 x 4); `trainctl list` is timed as a user meets it, a fresh process, next to `python -c pass`.
"""

from __future__ import annotations

import os
import shutil
import time
from functools import partial
from typing import TYPE_CHECKING, Any

from trainctl.targets.registry import names

from ..common import VENV_BIN, WORK, Figure, base_env, figure, interleaved, module_available, unavailable, wall
from ..jobs import variant

if TYPE_CHECKING:
    from trainctl.job import Job

TARGETS = names()  # the installed targets (their trainctl.targets entry points)

NAME = "scale"
RUNS = (10_000, 100_000)


def render_all(jobs: dict[str, list[Job]]) -> dict[str, float]:
    """Seconds to render every job for its target, per target."""
    out = {}
    for target, items in jobs.items():
        t0 = time.perf_counter()
        texts = {job.render(target).text for job in items}
        out[target] = time.perf_counter() - t0
        if len(texts) != len(items):
            raise RuntimeError(f"{target}: {len(items)} distinct jobs rendered to only {len(texts)} distinct texts")
    return out


def populate(home: str, count: int) -> float:
    """A registry of `count` runs across the targets; seconds taken.

    The first runs go through `RunStore.record` (so the file, schema and rows are the SDK's own);
    the rest are copies of those rows with new ids, inserted in one transaction, because
    `record` commits (and fsyncs) once per run, which for 10,000 runs would take minutes here."""
    import sqlite3

    from trainctl.run import Run
    from trainctl.runs.store import RunStore

    shutil.rmtree(home, ignore_errors=True)
    path = os.path.join(home, "runs.db")
    registry = RunStore(path)
    states = ["succeeded"] * 14 + ["failed", "cancelled", "running", "queued"]
    now = time.time()
    t0 = time.perf_counter()
    seeds = min(count, 40)
    for i in range(seeds):
        registry.record(_run(Run, i, now - (count - i) * 60), states[i % len(states)])
    conn = sqlite3.connect(path)
    columns = [row[1] for row in conn.execute("PRAGMA table_info(runs)")]
    rows = conn.execute(f"SELECT {', '.join(columns)} FROM runs").fetchall()
    by_target = {dict(zip(columns, r, strict=True))["target"]: dict(zip(columns, r, strict=True)) for r in rows}
    copies = []
    for i in range(seeds, count):
        run = _run(Run, i, now - (count - i) * 60)
        row = {**by_target[run.target], "id": run.id, "native_id": run.native_id, "job_name": run.job_name,
               "state": states[i % len(states)], "created_at": run.created_at, "updated_at": run.created_at}  # fmt: skip
        copies.append(tuple(row[c] for c in columns))
    with conn:
        conn.executemany(f"INSERT INTO runs ({', '.join(columns)}) VALUES ({', '.join('?' * len(columns))})", copies)
    conn.close()
    listed = registry.list()
    if len(listed) != count:
        raise RuntimeError(f"registry holds {len(listed)} runs, expected {count}")
    return time.perf_counter() - t0


def _run(cls: Any, i: int, created: float) -> Any:
    """The i-th run record, built by field name: run records are pydantic models (keyword fields only)."""
    target = TARGETS[i % len(TARGETS)]
    native = {"local": f"20261121-{i:06d}-bench", "slurm": str(100000 + i),
              "kubernetes": f"trainctl/bench-{i:05d}", "sagemaker": f"bench-{i:05d}-20261121"}[target]  # fmt: skip
    return cls.model_validate({"target": target, "native_id": native, "job_name": f"bench-{i:05d}",
                               "paths": {"log": f"/tmp/runs/{i}/log.txt"}, "created_at": created})  # fmt: skip


def run(quick: bool = False) -> list[Figure]:
    return run_render(quick) + run_list(quick)


def run_render(quick: bool = False) -> list[Figure]:
    """Render 1,000 distinct jobs (100 when quick) for every target whose module is there."""
    n_jobs, reps = (100, 1) if quick else (1000, 3)
    figs: list[Figure] = []
    missing = {t: module_available(f"trainctl.targets.{t}") for t in TARGETS}
    ready = [t for t in TARGETS if missing[t] is None]
    from trainctl.job import Job

    t0 = time.perf_counter()
    jobs = {t: [Job.parse(variant(t, i)) for i in range(n_jobs)] for t in ready}
    build_s = time.perf_counter() - t0
    totals: list[float] = []
    per_target: dict[str, list[float]] = {t: [] for t in ready}
    for _ in range(reps):
        timing = render_all(jobs)
        totals.append(sum(timing.values()))
        for t, s in timing.items():
            per_target[t].append(s)
    label = f"render {n_jobs:,} distinct jobs x {len(ready)} targets"
    note = "" if len(ready) == 4 else "missing: " + "; ".join(f"{t}: {m}" for t, m in missing.items() if m)
    if ready:
        figs.append(figure(NAME, label, totals, unit="s", target="< 2" if n_jobs == 1000 else None, note=note,
                           detail={"per_target_s": {t: round(min(v), 4) for t, v in per_target.items()},
                                   "building_the_jobs_s": round(build_s, 3)}))  # fmt: skip
    for t in TARGETS:
        if missing[t]:
            figs.append(unavailable(NAME, f"render {n_jobs:,} jobs for {t}", missing[t] or ""))
    return figs


def run_list(quick: bool = False) -> list[Figure]:
    """`trainctl list` over registries of 10,000 and 100,000 runs (1,000 when quick), as a fresh process."""
    why = module_available("trainctl.runs.store") or module_available("trainctl.cli")
    if why or not (VENV_BIN / "trainctl").is_file():
        return [
            unavailable(NAME, f"trainctl list over {RUNS[0]:,} runs", why or "no trainctl executable", "< 0.3", "s")
        ]
    figs: list[Figure] = []
    for count in (1000,) if quick else RUNS:
        figs += _list_over(count, quick)
    return figs


def _list_over(count: int, quick: bool) -> list[Figure]:
    home = str(WORK / "registry")
    fill_s = populate(home, count)
    env = base_env(TRAINCTL_HOME=home)
    trainctl = str(VENV_BIN / "trainctl")
    t = interleaved({
        "python": partial(wall, [str(VENV_BIN / "python"), "-c", "pass"], env),
        "list": partial(wall, [trainctl, "list"], env),
        "list all json": partial(wall, [trainctl, "list", "--limit", str(count), "--output", "json"], env),
    }, 3 if quick else 5)  # fmt: skip
    shutil.rmtree(home, ignore_errors=True)
    return [
        figure(NAME, f"trainctl list over {count:,} runs", t["list"], unit="s", target="< 0.3",
               note="a fresh process, default view (newest 50)",
               detail={"python_start_s": round(min(t["python"]), 4), "registry_fill_s": round(fill_s, 2),
                       "load_avg": round(os.getloadavg()[0], 2)}),
        figure(NAME, f"trainctl list --limit {count} --output json", t["list all json"], unit="s",
               note="every run, as JSON"),
    ]  # fmt: skip

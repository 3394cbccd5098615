"""`job.with_function(fn).map([...kwargs...])`: one trial per item, run as a sweep is (a SLURM array on SLURM),
and one handle whose `results()` come back in input order, as submitit's `map_array`.

A sweep's trials are rebuilt from the recorded job (the local driver is another process), so the call cannot
ride on the job object: the prepared bundle (your `code:` files and the payload) is unpacked once into
`$TRAINCTL_HOME/functions/<sha16>/` beside the items, and the trials name that folder as their `code:`; the
sweep varies `env.TRAINER_FUNCTION_ITEM`, which the trainer reads to pick its item. Packing the folder again
gives the same files, verified on every node as any code bundle is.
"""

from __future__ import annotations

import hashlib
import io
import tarfile
from collections.abc import Mapping, Sequence
from typing import Any

from ..errors import EngineError, JobError
from ..function import ENV_ITEM, ITEMS, ship_items
from ..run import Run
from ..runs.store import state_dir
from ..spec.code import Code
from ..spec.job_spec import JobSpec
from ..spec.sweep import merged
from ..submit.bundle import prepare, prepared
from .handle import Sweep, start


class FunctionMap:
    """The handle of a `map`: its sweep, and every item's result in input order."""

    def __init__(self, sweep: Sweep) -> None:
        self.sweep = sweep

    @property
    def id(self) -> str:
        return self.sweep.id

    def runs(self) -> list[Run | None]:
        """Each item's run, in input order (None: not submitted yet, or never)."""
        trials = sorted(self.sweep.trials(), key=lambda t: t.index)
        return [Run.from_id(t.run_id) if t.run_id else None for t in trials]

    def results(self, timeout: float | None = None, poll: float = 1.0) -> list[Any]:
        """Every item's value (rank 0's), in input order, once all have ended; the first item's error raises, as
        `Run.result` raises it (its own type, a RemoteError, or RunFailed for a trial that ended without one)."""
        self.sweep.wait(timeout=timeout, poll=poll)
        values = []
        for index, run in enumerate(self.runs()):
            if run is None:
                raise EngineError(f"{self.id}: item {index} was never run (the map was cancelled?)")
            values.append(run.result(timeout=60))
        return values

    def cancel(self) -> list[str]:
        return self.sweep.cancel()

    def __repr__(self) -> str:
        return f"FunctionMap(id={self.id!r}, items={len(self.sweep.trials())})"


def start_map(
    job: JobSpec, items: Sequence[Mapping[str, Any]], target: str, parallel: int, **options: Any
) -> FunctionMap:
    """Check every item and trial, then start them as a sweep; nothing is queued when one is refused."""
    function = job.function
    if function is None:
        raise JobError(["map: the job has no function; call job.with_function(fn, ...) first, then .map(items)"])
    items = list(items)
    if not items:
        raise JobError([f"map({function.name}): got no items; give one dict of keyword arguments per call"])
    shipped = ship_items(function.name, items)
    base = _as_code_job(prepare(job), shipped)
    spec = merged(base.search_space, grid={f"env.{ENV_ITEM}": [str(i) for i in range(len(items))]}, parallel=parallel)
    return FunctionMap(start(base, spec, target, **options))


def _as_code_job(job: JobSpec, items: bytes) -> JobSpec:
    """The job with its bundle (code files and payload) and the items as a `code:` folder, the call's versions and
    digest in its `env`: a job the sweep can record, rebuild and pack again to the same bytes."""
    bundle, function = prepared(job), job.function
    assert bundle is not None and function is not None
    folder = state_dir() / "functions" / hashlib.sha256(bundle.data + items).hexdigest()[:16]
    if not (folder / ITEMS).is_file():  # the same bundle and items: the same folder, written once
        with tarfile.open(fileobj=io.BytesIO(bundle.data), mode="r:gz") as tar:
            tar.extractall(folder, filter="data")
        (folder / ITEMS).write_bytes(items)
    code = Code(dir=str(folder), requirements=bundle.requirements)
    update = {"code": code, "env": {**job.env, **function.env()}}
    return job.model_copy(update=update)._with_private("_function", None)._with_private("_base_dir", None)

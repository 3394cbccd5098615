"""A sweep's files: `$TRAINCTL_HOME/sweeps/<id>/` holds `sweep.json` (what was asked, written once),
`trials.json` (each trial's run and fate, rewritten by whoever acts on the sweep), `driver.json` (the
detached driver's pid), `log.txt` (what the driver did, and why) and `cancel` (a flag: submit no more).
"""

from __future__ import annotations

import json
import os
import secrets
import time
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from ..runs.store import UnknownRunError, state_dir
from ..spec.sweep import Scalar, SweepSpec
from ..targets.processes import write_json

PREFIX = "sweep:"


class Trial(BaseModel):
    """One point of the space and what became of it."""

    model_config = ConfigDict(extra="ignore")

    index: int
    params: dict[str, Scalar]
    run_id: str | None = Field(None, description="The trial's run, once submitted.")
    stopped_early: str | None = Field(None, description="Why the median rule stopped it.")
    error: str | None = Field(None, description="Why it could not be submitted.")


class TrialRow(BaseModel):
    """A line of `trainctl sweep status`: one trial, its state now and the metric it reached."""

    index: int
    params: dict[str, Scalar]
    run_id: str | None
    state: str
    metric: float | None
    step: int | None
    note: str | None = None
    compared: float | None = None
    """While trials run at different steps: the metric at `compared_at` (what ranks it), else None."""
    compared_at: int | None = None
    """The newest step every trial with a value has reached, when they are at different steps."""


class SweepRecord(BaseModel):
    """What was asked: the job (without its `sweep:`), where its relative paths start, the target and its
    options, the search space with its seed."""

    model_config = ConfigDict(extra="ignore")

    native_id: str
    job_name: str
    target: str
    options: dict[str, Any] = Field(default_factory=dict)
    spec: SweepSpec
    job: dict[str, Any]
    base_dir: str | None = None
    created_at: float = Field(default_factory=time.time)
    engine_id: str | None = Field(None, description="One engine job for all trials (a SLURM array job).")
    search: dict[str, Any] | None = Field(
        None, description="The engine's own search (bayesian: a SageMaker tuning job), as its target records it."
    )

    @property
    def id(self) -> str:
        return PREFIX + self.native_id


def sweeps_dir() -> Path:
    return state_dir() / "sweeps"


def new_id(job_name: str) -> str:
    return f"{job_name}-{time.strftime('%Y%m%d-%H%M%S')}-{secrets.token_hex(2)}"


def native(sweep_id: str) -> str:
    """`sweep:<id>` or `<id>` -> `<id>`, refusing what could climb out of the sweeps folder."""
    name = sweep_id.removeprefix(PREFIX)
    if not name or "/" in name or name.startswith("."):
        raise UnknownRunError(f"{sweep_id!r} is not a sweep id (sweep:<job>-<date>-<time>-<hex>)")
    return name


def folder(sweep_id: str) -> Path:
    return sweeps_dir() / native(sweep_id)


def create(record: SweepRecord, trials: list[Trial]) -> Path:
    where = sweeps_dir() / record.native_id
    where.mkdir(mode=0o700, parents=True)
    write_json(where / "sweep.json", record.model_dump(mode="json"))
    save_trials(where, trials)
    return where


def load(sweep_id: str) -> tuple[SweepRecord, list[Trial]]:
    where = folder(sweep_id)
    if not (where / "sweep.json").is_file():
        raise UnknownRunError(f"no sweep {sweep_id!r} is recorded here ({sweeps_dir()})")
    record = SweepRecord.model_validate_json((where / "sweep.json").read_text())
    return record, load_trials(where)


def load_trials(where: Path) -> list[Trial]:
    return [Trial.model_validate(t) for t in json.loads((where / "trials.json").read_text())]


def save_trials(where: Path, trials: list[Trial]) -> None:
    write_json(where / "trials.json", [t.model_dump(mode="json") for t in trials])


def say(where: Path, line: str) -> None:
    """One line of the sweep's log, time-stamped."""
    with open(where / "log.txt", "a") as fh:
        fh.write(f"{time.strftime('%Y-%m-%d %H:%M:%S')} {line}\n")


def take_driver_lock(where: Path) -> int | None:
    """The descriptor holding `driver.lock` (kept open for the driver's life; the kernel drops the lock when
    it dies, however it dies), or None when another driver holds it."""
    import fcntl

    fd = os.open(where / "driver.lock", os.O_CREAT | os.O_RDWR, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        return None
    return fd


def driver_running(where: Path) -> bool:
    """Whether a driver holds the sweep's lock now."""
    fd = take_driver_lock(where)
    if fd is None:
        return True
    os.close(fd)
    return False

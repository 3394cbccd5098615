"""Removing runs that are over: `trainctl rm RUN...` and `trainctl prune --older-than 30d`.

A run's record leaves the store. Its files go with it only where trainctl made them on this machine: a
local run's own folder under `$TRAINCTL_HOME/runs/` (its log, output and checkpoints unless the job named
other folders). What lives elsewhere stays, and is named: a folder the job chose (`checkpoint.dir`), a
SLURM workdir on the cluster, a PVC folder, an S3 prefix. Those may be another run's to continue from, and
their storage has its own tools and policies (a lifecycle rule on the bucket, a cleanup job on the cluster).

Refused, with what to do: a run that has not ended (cancel it first), and a sweep's trial on its own (the
sweep's rows read it): a sweep goes whole, its trials and its folder, once it has ended (`trainctl rm
sweep:<id>`, `Sweep.remove`); `prune` leaves sweeps alone.
"""

from __future__ import annotations

import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path

from ..errors import UsageError
from .store import RunRecord, RunStore, state_dir


@dataclass(frozen=True)
class Removal:
    """What removing one run does: the record, the local folders deleted with it, and what stays."""

    record: RunRecord
    folders: list[Path] = field(default_factory=list)
    stays: list[str] = field(default_factory=list)
    size: int = 0

    def describe(self) -> str:
        said = f"{self.record.id} ({self.record.state.value}, {self.record.run.target})"
        if self.folders:
            said += f": {', '.join(map(str, self.folders))} ({human_size(self.size)})"
        return said + "".join(f"\n  stays: {where}" for where in self.stays)


def refusal(record: RunRecord, sweeps: bool = False) -> str | None:
    """Why `record` cannot be removed now, with what to do; None: it can."""
    if not record.state.finished:
        return f"{record.id} is {record.state.value}: cancel it first (`trainctl cancel {record.id}`)"
    sweep = record.run.sweep_id
    if sweep and not sweeps:
        return f"{record.id} is a trial of {sweep}: it goes with its sweep (`trainctl rm {sweep}`)"
    return None


def plan(record: RunRecord) -> Removal:
    """The removal of `record` (checked with `refusal` first): local folders of its own, and where the rest
    stays."""
    paths, own_root = record.run.paths, (state_dir() / "runs").resolve()
    folders: list[Path] = []
    if record.run.target == "local" and paths.run_dir and _inside(Path(paths.run_dir), own_root):
        folders.append(Path(paths.run_dir))
    stays = []
    for name in ("run_dir", "checkpoint_dir", "output_dir"):
        where = getattr(paths, name)
        if where and not any(_inside(Path(where), f) for f in folders) and where not in stays:
            stays.append(where)
    if record.run.target != "local":
        stays = [f"{where} (on the {record.run.target} target's storage)" for where in stays]
    return Removal(record, folders, stays, sum(_size(f) for f in folders))


def remove(removal: Removal, store: RunStore) -> None:
    """The folders first, then the record: a failure part way leaves a record that names what is left."""
    for folder in removal.folders:
        if folder.exists():
            shutil.rmtree(folder)
    store.delete(removal.record.id)


def older_than(store: RunStore, age_s: float, target: str | None) -> list[RunRecord]:
    """The ended runs, not a sweep's trials, created more than `age_s` ago, oldest first."""
    cutoff = time.time() - age_s
    found = [r for r in store.list(target=target) if r.run.created_at < cutoff]
    return sorted((r for r in found if refusal(r) is None), key=lambda r: r.run.created_at)


def checked(records: list[RunRecord], sweeps: bool = False) -> list[Removal]:
    """Removals for every record, or a UsageError naming every one that cannot go (nothing is removed)."""
    problems = [why for r in records if (why := refusal(r, sweeps)) is not None]
    if problems:
        raise UsageError(problems)
    return [plan(r) for r in records]


def human_size(size: int) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if size < 1024 or unit == "GiB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024  # type: ignore[assignment]
    return f"{size} B"


def _inside(path: Path, folder: Path) -> bool:
    return path.resolve().is_relative_to(folder.resolve())


def _size(folder: Path) -> int:
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file() and not p.is_symlink())

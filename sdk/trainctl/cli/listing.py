"""What `trainctl list` does once its options are parsed, without typer: the typer command (cli/runs.py) and the
typer-free start (cli/fast.py) both call `list_runs`, so the two write the same bytes."""

from __future__ import annotations

import contextlib
from typing import Any

from .output import OutputFormat, echo, print_json
from .runs_table import print_table


def list_runs(target: str | None, state: str | None, limit: int, refresh: bool, output: OutputFormat) -> None:
    """Runs submitted from this machine, on every target, newest first: local runs as they are now, the others
    with their last known state (`refresh` asks their engines)."""
    from ..errors import UsageError
    from ..runs.state import RunState
    from ..runs.store import RunStore
    from ..targets.registry import canonical, names, unknown

    target = canonical(target) if target is not None else None
    if target is not None and target not in names():
        raise unknown(target, "--target")
    if state is not None and state not in {s.value for s in RunState}:
        raise UsageError([f"--state: got {state!r}; expected one of {', '.join(s.value for s in RunState)}"])
    store = RunStore()
    # local runs first, unfiltered: one recorded as queued may be running (or over) by now, whatever --state asks
    newest = store.list(target=target, limit=limit)
    unfinished = {rec.run.id: rec.run for rec in newest if not rec.state.finished and _status_is_free(rec.run.target)}
    records = store.list(target=target, state=state, limit=limit)
    if refresh:
        unfinished.update((rec.run.id, rec.run) for rec in records if not rec.state.finished)
    if unfinished:
        refresh_states(store, list(unfinished.values()))
        records = store.list(target=target, state=state, limit=limit)
    if output is OutputFormat.json:
        print_json([r.to_dict() for r in records])
        return
    if not records:
        which = " ".join(word for word in (state, target) if word)
        if which:  # a filter left nothing: say which, not "no runs yet"
            echo(f"no {which} runs are recorded here; `trainctl list` shows them all", err=True)
        else:
            echo("no runs yet; submit one with: trainctl submit JOB --target local", err=True)
        return
    print_table(records)


def _status_is_free(target: str) -> bool:
    from ..targets.lookup import get_target
    from ..targets.registry import names

    return target in names() and get_target(target).status_is_free


def refresh_states(store: Any, runs: list[Any]) -> None:
    """Ask each target once for all of its unfinished runs (`Target.status_many`), and save their states."""
    from ..errors import TrainctlError
    from ..runs import records as run_records
    from ..runs.state import RunState
    from ..submit.trackers import settle
    from ..targets.lookup import get_target
    from ..targets.registry import names

    by_target: dict[str, list[Any]] = {}
    for run in runs:
        by_target.setdefault(run.target, []).append(run)
    for name, group in by_target.items():
        if name not in names():  # a run of a target that is no longer installed: its last known state stays
            continue
        ids = {run.id: run for run in group}
        with contextlib.suppress(TrainctlError):
            read = {
                run_id: run_records.explained(run_records.of_last_attempt(said))  # as `Run.status` shows it
                for run_id, said in get_target(name).status_many(group).items()
            }
            store.save_statuses(read)  # one transaction for the group
            for run_id, found in read.items():
                if found.state.finished and run_id in ids:  # a tracker run nothing in the job could end
                    settle(ids[run_id], found.state is RunState.SUCCEEDED)

"""`trainctl rm` and `trainctl prune`: forget runs that are over, and delete the files trainctl made for them on
this machine (runs/removal.py says what goes and what stays)."""

from __future__ import annotations

import sys
from typing import Any

import typer

from .common import OutputFormat, handles_errors, output_option, print_json

DRY_RUN = typer.Option(False, "--dry-run", "-n", help="Say what would be removed; remove nothing.")
OUTPUT_OPT = output_option()


@handles_errors
def rm(
    run_ids: list[str] = typer.Argument(
        ..., metavar="RUN", help="Runs that have ended (ids or unique prefixes), or sweep:<id>.", show_default=False
    ),
    dry_run: bool = DRY_RUN,
    output: OutputFormat = OUTPUT_OPT,
) -> None:
    """Remove runs that have ended: their records, and a local run's own folder (log, output, checkpoints).
    What lives elsewhere (a cluster's workdir, a PVC, S3, a checkpoint.dir you named) stays, and is named."""
    from ..runs.removal import checked
    from ..runs.store import RunStore
    from ..sweeps.handle import Sweep

    store = RunStore()
    sweeps = [Sweep.from_id(given) for given in run_ids if given.startswith("sweep:")]
    ids = [store.resolve(given) for given in run_ids if not given.startswith("sweep:")]
    _refresh_unfinished(store, ids + [t.run_id for s in sweeps for t in s.trials() if t.run_id])
    records = [_record(store, run_id) for run_id in ids]
    removals = checked(records)
    by_sweep = [(sweep, sweep.removals()) for sweep in sweeps]
    everything = removals + [r for _, found in by_sweep for r in found]
    if not dry_run:
        from ..runs.removal import remove

        for removal in removals:
            remove(removal, store)
        for sweep, found in by_sweep:
            sweep.remove(found)
    _report(everything, dry_run, output, [s.id for s in sweeps])


@handles_errors
def prune(
    older_than: str = typer.Option(
        ..., "--older-than", metavar="AGE", help='Runs created more than AGE ago ("30d", "12h", "90m").'
    ),
    target: str | None = typer.Option(None, "--target", "-t", help="Only runs on this target."),
    dry_run: bool = DRY_RUN,
    yes: bool = typer.Option(False, "--yes", "-y", help="Do not ask (needed where no one can answer)."),
    output: OutputFormat = OUTPUT_OPT,
) -> None:
    """Remove every run that has ended and was created more than AGE ago (a sweep's trials stay: `trainctl rm
    sweep:<id>` removes a sweep whole). Asks first, unless --yes or --dry-run."""
    from ..errors import UsageError
    from ..runs.removal import checked, remove
    from ..runs.removal import older_than as older
    from ..runs.store import RunStore
    from ..spec.units import DURATION_HELP, parse_duration
    from ..targets.registry import canonical

    try:
        age_s = parse_duration(older_than)
    except ValueError:
        raise UsageError([f"--older-than: got {older_than!r}; expected {DURATION_HELP}"]) from None
    store = RunStore()
    target = canonical(target) if target else None
    _refresh_unfinished(store, [r.id for r in store.list(target=target) if not r.state.finished])
    removals = checked(older(store, age_s, target))
    if removals and not dry_run and not yes:
        if not sys.stdin.isatty():
            raise UsageError([f"prune would remove {len(removals)} run(s): pass --yes, or --dry-run to see them"])
        _report(removals, True, OutputFormat.text, [])
        if not typer.confirm(f"remove these {len(removals)} run(s)?"):
            raise typer.Exit(1)
    if not dry_run:
        for removal in removals:
            remove(removal, store)
    _report(removals, dry_run, output, [])


def _record(store: Any, run_id: str) -> Any:
    from ..runs.store import UnknownRunError

    found = store.get_record(run_id)
    if found is None:
        raise UnknownRunError(f"run {run_id} is not recorded here: nothing to remove (`trainctl list` shows them)")
    return found


def _refresh_unfinished(store: Any, ids: list[str]) -> None:
    """A run recorded as running may have ended since: ask its engine first, as `list` does."""
    from .listing import refresh_states

    records = [r for run_id in ids if (r := store.get_record(run_id)) is not None and not r.state.finished]
    if records:
        refresh_states(store, [r.run for r in records])


def _report(removals: list[Any], dry_run: bool, output: OutputFormat, sweeps: list[str]) -> None:
    from ..runs.removal import human_size

    if output is OutputFormat.json:
        print_json(
            {
                "dry_run": dry_run,
                "sweeps": sweeps,
                "runs": [
                    {"id": r.record.id, "folders": [str(f) for f in r.folders], "stays": r.stays, "bytes": r.size}
                    for r in removals
                ],
            }
        )
        return
    if not removals and not sweeps:
        typer.echo("nothing to remove", err=True)
        return
    verb = "would remove" if dry_run else "removed"
    for removal in removals:
        typer.echo(f"{verb} {removal.describe()}")
    for sweep in sweeps:
        typer.echo(f"{verb} {sweep} and its folder")
    total = sum(r.size for r in removals)
    typer.echo(f"{verb} {len(removals)} run(s), {human_size(total)} on this machine")

"""`trainctl sweep`: start a sweep (`trainctl sweep JOB --grid ...`), `sweep status S`, `sweep cancel S`.

`trainctl sweep JOB ...` is short for `trainctl sweep start JOB ...`: the group reads a first word that is
not one of its commands as the job file.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import typer
from typer.core import TyperGroup

from .common import OutputFormat, fail, handles_errors, load_job, print_json

SWEEP_ARG = typer.Argument(..., metavar="SWEEP", help="The sweep's id, sweep:<job>-<date>-<time>-<hex>.")
OUTPUT_OPT = typer.Option(OutputFormat.text, "--output", help="text for people, json for scripts.")


class _StartByDefault(TyperGroup):
    """`sweep JOB ...` runs `sweep start JOB ...`."""

    def parse_args(self, ctx: Any, args: list[str]) -> list[str]:
        if args and args[0] not in self.commands and args[0] not in ("-h", "--help"):
            args = ["start", *args]
        result: list[str] = super().parse_args(ctx, args)
        return result


app = typer.Typer(
    cls=_StartByDefault,
    help="Run a grid or random search over a job's fields as one unit: `trainctl sweep JOB --grid trainer.lr="
    "1e-3,3e-3`, then `sweep status S` (best first) and `trainctl cancel S` (docs/sweeps.md).",
    no_args_is_help=True,
)


@app.command()
@handles_errors
def start(
    job_file: Path = typer.Argument(..., help="The job file (YAML); its `sweep:` section, if any, is the base."),
    grid: list[str] = typer.Option([], "--grid", metavar="KEY.PATH=V1,V2", help="Values to try (repeatable)."),
    random: list[str] = typer.Option(
        [], "--random", metavar="KEY.PATH=EXPR", help="loguniform(a,b), uniform(a,b), randint(a,b), choice(..)."
    ),
    trials: int | None = typer.Option(None, "--trials", help="Random draws (per grid point)."),
    parallel: int | None = typer.Option(None, "--parallel", "-p", help="Trials running at once (default 1)."),
    metric: str | None = typer.Option(None, "--metric", help="The trainer metric to rank by (default val_accuracy)."),
    mode: str | None = typer.Option(None, "--mode", help="max or min (default max)."),
    seed: int | None = typer.Option(None, "--seed", help="Random search's seed (default: chosen, and recorded)."),
    strategy: str | None = typer.Option(
        None, "--strategy", help="grid, random, or bayesian (SageMaker: one HyperParameterTuningJob)."
    ),
    early_stop_after: int | None = typer.Option(
        None, "--early-stop-after", metavar="STEP", help="The median rule from this step on (docs/sweeps.md)."
    ),
    target: str = typer.Option("local", "--target", "-t", help="Where the trials run."),
    overrides: list[str] = typer.Option([], "--set", "-s", metavar="KEY.PATH=VALUE", help="Override a field first."),
    options: list[str] = typer.Option([], "--option", "-O", metavar="KEY=VALUE", help="A submit option of the target."),
    dry_run: bool = typer.Option(
        False, "--dry-run", help="Check every trial and show what would be sent (bayesian: the request); send nothing."
    ),
    output: OutputFormat = OUTPUT_OPT,
) -> None:
    """Check every trial, then start the sweep; nothing is submitted when one is invalid (exit 2)."""
    from ..spec.loading import parse_options
    from ..spec.sweep import from_flags
    from ..sweeps.handle import start as start_sweep

    job = load_job(job_file, overrides)
    stopping = {"after_step": early_stop_after} if early_stop_after is not None else None
    spec = from_flags(
        job.search_space, grid, random, trials=trials, parallel=parallel, metric=metric, mode=mode, seed=seed,
        early_stopping=stopping, strategy=strategy,
    )  # fmt: skip
    if dry_run:
        _dry_run(job, spec, target, parse_options(options), output)
        return
    sweep = start_sweep(job, spec, target, **parse_options(options))
    trials_ = sweep.trials()
    if output is OutputFormat.json:
        print_json(
            {"id": sweep.id, **sweep.record.model_dump(mode="json"), "trials": [t.model_dump() for t in trials_]}
        )
        return
    seed_text = f", seed {sweep.record.spec.seed}" if sweep.record.spec.random else ""
    search = f" as tuning job {sweep.record.engine_id}" if sweep.record.search else ""
    count = sweep.record.spec.size if sweep.record.search else len(trials_)
    typer.echo(
        f"started {sweep.id}{search}: {count} trials on {target}, {sweep.record.spec.parallel} at once{seed_text}"
    )
    typer.echo(f"  watch it: trainctl sweep status {sweep.id}", err=True)


def _dry_run(job: Any, spec: Any, target: str, options: dict[str, Any], output: OutputFormat) -> None:
    """bayesian: the one request (as `trainctl render` shows a job's); grid/random: every trial's values, checked."""
    from ..spec.sweep import params_text

    if spec.chosen_strategy == "bayesian":
        from ..sweeps.search import render

        rendered = render(job, spec, target, **options)
        typer.echo(rendered.text, nl=False)
        for note in rendered.notes:
            typer.echo(f"note: {note}", err=True)
        return
    from ..sweeps.trials import checked_trials
    from ..targets.lookup import get_target

    seeded = spec.seeded(0) if spec.seed is None else spec
    trials = checked_trials(job, seeded, target, get_target(target).parse_options(**options))
    if output is OutputFormat.json:
        print_json({"seed": seeded.seed if spec.random else None, "trials": [t.model_dump() for t in trials]})
        return
    for trial in trials:
        typer.echo(f"trial {trial.index}: {params_text(trial.params)}")
    typer.echo(f"{len(trials)} trials checked on {target}; nothing submitted", err=True)


@app.command()
@handles_errors
def status(sweep_id: str = SWEEP_ARG, output: OutputFormat = OUTPUT_OPT) -> None:
    """The trials, best first: state, the metric, the step it was read at, the values, the run."""
    from ..sweeps.handle import Sweep

    sweep = Sweep.from_id(sweep_id)
    note = sweep.recover()
    rows = sweep.rows()
    spec = sweep.record.spec
    if output is OutputFormat.json:
        print_json({"id": sweep.id, "metric": spec.metric, "mode": spec.mode, "trials": [r.model_dump() for r in rows]})
        return
    if note:
        typer.echo(f"note: {note}", err=True)
    from ..spec.sweep import params_text
    from .runs_table import print_rows

    header = ("TRIAL", "STATE", spec.metric.upper(), "STEP", "PARAMS", "RUN")
    table = [
        (
            str(r.index),
            r.state,
            "" if r.metric is None else f"{r.metric:.4f}",
            "" if r.step is None else str(r.step),
            params_text(r.params),
            r.run_id or "",
        )
        for r in rows
    ]
    print_rows(header, table)
    best = rows[0] if rows and rows[0].metric is not None else None
    if best is not None and best.compared_at is not None:
        shown = "(none yet)" if best.compared is None else f"{best.compared:.4f}"
        typer.echo(
            f"best so far: trial {best.index} ({params_text(best.params)}): {spec.metric} {shown} at step "
            f"{best.compared_at}, the newest step every trial has reached (the trials are at different steps)"
        )
    elif best is not None:
        typer.echo(f"best: trial {best.index} ({params_text(best.params)}): {spec.metric} {best.metric:.4f}")
    for r in rows:
        if r.note:
            typer.echo(f"trial {r.index}: {r.note}")


@app.command()
@handles_errors
def cancel(sweep_id: str = SWEEP_ARG) -> None:
    """Stop the sweep: no new trial starts, every running one is cancelled (SIGTERM first: it checkpoints)."""
    cancel_sweep(sweep_id)


def cancel_sweep(sweep_id: str, as_json: bool = False) -> None:
    """Shared with `trainctl cancel sweep:...` (which may ask for JSON: then a failure is JSON too)."""
    from ..errors import EngineError
    from ..sweeps.handle import Sweep

    sweep = Sweep.from_id(sweep_id)
    problems = sweep.cancel()
    if problems and as_json:
        raise EngineError("; ".join(problems))  # handles_errors writes it as a JSON error object
    if problems:
        raise fail("; ".join(problems), 1)
    if as_json:
        print_json({"id": sweep.id, "state": "cancelled"})
    else:
        typer.echo(f"{sweep.id}: cancelled")

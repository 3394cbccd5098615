"""Commands on submitted runs, on any target: status, logs, cancel, list."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import typer

from .common import OutputFormat, handles_errors, output_option, print_json
from .runs_table import COLORS as _COLORS

RUN_ID_HELP = (
    "Run id (local:<id>, slurm:<jobid>, kubernetes:<ns>/<name>, sagemaker:<name>), or a unique prefix of one "
    "(the bare local id works)"
)
RUN_ARG = typer.Argument(..., metavar="RUN", help=f"{RUN_ID_HELP}.", show_default=False)
NEWEST_RUN_ARG = typer.Argument(
    None, metavar="RUN", help=f"{RUN_ID_HELP}; default: the newest run.", show_default=False
)
OUTPUT_OPT = output_option()


def _run(run_id: str | None) -> Any:
    """The run handle; a malformed id is invalid input (exit 2), like an unknown one."""
    from ..errors import TrainctlError
    from ..run import Run
    from ..runs.store import UnknownRunError

    try:
        return Run.from_id(run_id)
    except UnknownRunError:
        raise
    except TrainctlError as exc:
        raise UnknownRunError(str(exc)) from None


@handles_errors
def status(run_id: str | None = NEWEST_RUN_ARG, output: OutputFormat = OUTPUT_OPT) -> None:
    """The run's state now, from its engine (also saved as its last known state), and its record. Without RUN:
    the newest run."""
    run = _run(run_id)
    st = run.status()
    summary = _finished_summary(run, st)
    model = summary.get("model") if isinstance(summary.get("model"), str) else None
    if output is OutputFormat.json:  # the record, and the status read now
        print_json({**run.record(), **st.to_dict(), **({"final_model": model} if model else {})})
        return
    from rich.console import Console
    from rich.markup import escape

    console = Console(highlight=False, soft_wrap=True)
    color = _COLORS.get(st.state.value, "white")
    native = f" ({escape(st.native_state)})" if st.native_state and st.native_state != st.state.value else ""
    console.print(f"{escape(run.id)}  [bold {color}]{st.state.value}[/]{native}")
    if run.job_name:
        console.print(f"  job: {escape(run.job_name)}")
    if run.run_uid:
        console.print(f"  run uid: {escape(run.run_uid)}")
    if st.progress is not None:
        from ..runs.progress import describe, mode_line

        console.print(f"  progress: {escape(describe(st.progress, st.state.finished))}")
        if mode_line(st.progress):
            console.print(f"  deterministic algorithms: {escape(mode_line(st.progress))}")
    if st.reason:
        console.print(f"  reason: {escape(st.reason)}")
    from ..runs.outputs import accuracy_line

    if accuracy := accuracy_line(summary):
        console.print(f"  {escape(accuracy)}")
    if model:
        console.print(f"  final model: {escape(model)} (`trainctl pull {escape(run.id)}` copies the output here)")
    if run.paths.output_s3:
        console.print(
            f"  output: {escape(run.paths.output_s3)} (uploaded after each attempt; whole once _complete is there)"
        )
    from ..runs.image_ids import image_lines
    from ..runs.records import attempt_line, failure_line, slow_node_line, tail_heading
    from ..runs.times import local_time

    for node in st.slow_nodes:
        console.print(f"  [bold yellow]slow node: {escape(slow_node_line(node))}[/]")
    if st.failure is not None and st.failure.kind == "error":  # the reason names it: here its last lines
        if st.log_tail:
            console.print(f"  {escape(tail_heading(st.failure))}:")
        for line in st.log_tail:
            console.print(f"    {escape(line)}", soft_wrap=True)
    elif st.failure is not None:
        console.print(f"  [bold red]failure: {escape(failure_line(st.failure))}[/]")
    for attempt in st.attempts:
        console.print(f"  {escape(attempt_line(attempt))}")
    if st.state.value in ("cancelled", "failed") and st.progress is not None and (st.progress.step or 0) > 0:
        console.print(f"  continue it: trainctl submit JOB_FILE --resume-from {escape(run.id)} (any target)")
    exclude = {"state", "native_state", "reason", "images", "details", "log_tail", "slow_nodes", "failure", "progress",
               "attempts"}  # fmt: skip
    from ..runs.store import RunStore

    recorded = RunStore().get(run.id) is not None  # a job submitted elsewhere has no submit time here
    console.print(f"  submitted: {local_time(run.created_at) if recorded else 'elsewhere (not recorded here)'}")
    shown = st.model_dump(exclude=exclude)
    for key, value in sorted({**shown, **st.details}.items()):
        if value not in (None, "", [], {}):
            text = local_time(value) if key.endswith("_at") and isinstance(value, (int, float)) else str(value)
            console.print(f"  {key}: {escape(text)}")
    took = _took(st.details)
    if took:
        console.print(f"  duration: {took}")
    for line in image_lines(st.images):
        console.print(f"  [bold yellow]{escape(line)}[/]" if line.startswith("WARNING") else f"  {escape(line)}")
    prov = run.provenance.model_dump() if run.provenance else {}
    for key in ("image", "image_digest", "code_sha256", "spec_sha256", "trainctl_version"):
        if prov.get(key):
            console.print(f"  {key}: {escape(str(prov[key]))}")
    came = run.resumed_from
    if came is not None:
        step = f" step {came.step}" if came.step is not None else ""
        console.print(f"  resumed from: {escape(came.run)}{step} ({escape(came.checkpoint)})")
        if came.changes:
            console.print(f"  changed since that checkpoint: {escape(', '.join(came.changes))}")
        elif came.by:
            console.print(f"  copied by {escape(came.by)}; the run's log names each changed setting")
    if run.tracker_run_id is not None:
        where = f" at {run.tracker_uri}" if run.tracker_uri else ""
        console.print(f"  tracker run: {escape(run.tracker_run_id)}{escape(where)} (every attempt logs into it)")


def _finished_summary(run: Any, st: Any) -> dict[str, Any]:
    """A succeeded run's summary.json (its final model, the file rank 0 wrote, and its accuracy), else {}."""
    from ..errors import TrainctlError
    from ..runs.state import RunState

    if st.state is not RunState.SUCCEEDED:
        return {}
    try:
        summary = run.summary()
    except TrainctlError:
        return {}
    return summary if isinstance(summary, dict) else {}


def _took(details: dict[str, Any]) -> str:
    """How long the run ran: from its start to its end, or so far (where the target reports the times)."""
    import time

    from ..runs.times import duration

    start, end = details.get("started_at"), details.get("finished_at")
    if not isinstance(start, (int, float)):
        return ""
    if isinstance(end, (int, float)):
        return duration(end - start)
    return f"{duration(time.time() - start)} so far"


@handles_errors
def logs(
    run_id: str | None = NEWEST_RUN_ARG,
    follow: bool = typer.Option(False, "--follow", "-f", help="Keep streaming until the run ends."),
    output: OutputFormat = output_option("json: one JSON object per line."),
) -> None:
    """Print the run's log (with --follow, stream it until the run ends). Without RUN: the newest run."""
    import json

    run = _run(run_id)
    try:
        for line in run.logs(follow=follow):
            if output is OutputFormat.json:
                sys.stdout.write(json.dumps({"run": run.id, "line": line}) + "\n")
            else:
                sys.stdout.write(line + "\n")
            sys.stdout.flush()
    except BrokenPipeError:  # `trainctl logs ... | head`
        sys.stderr.close()


@handles_errors
def metrics(
    run_ids: list[str] | None = typer.Argument(
        None, metavar="[RUN]...", help="Run ids, each drawn as one curve; default: the newest run.", show_default=False
    ),
    output: str = typer.Option("text", "--output", help="text (a table), json or csv."),
    plot: Path | None = typer.Option(None, "--plot", help="Also draw loss and validation curves into this PNG."),
    lineage: bool = typer.Option(True, "--lineage/--no-lineage", help="Prepend the runs each was resumed from."),
) -> None:
    """A run's metrics from any target (the trainer's metrics.jsonl, else its log); several runs overlay. Without
    RUN: the newest run, as status and logs."""
    from ..errors import JobError
    from ..runs.curves import csv_text, table
    from ..runs.curves import plot as draw

    if output not in ("text", "json", "csv"):
        raise JobError([f"--output: got {output!r}; expected text, json or csv"])
    chosen: list[str | None] = list(run_ids) if run_ids else [None]  # None: the newest run
    curves = {run.id: run.metrics(lineage=lineage) for run in (_run(run_id) for run_id in chosen)}
    rows = [row for found in curves.values() for row in found]
    if plot is not None:
        draw(curves, plot)
        typer.echo(f"plot written to {plot}", err=True)
    if output == "json":
        print_json(rows)
    elif output == "csv":
        sys.stdout.write(csv_text(rows))
    else:
        sys.stdout.write(table(rows))


@handles_errors
def pull(
    run_id: str | None = NEWEST_RUN_ARG,
    dest: Path | None = typer.Argument(
        None, metavar="DIR", help="A new or empty folder; default: ./<target>-<engine id>.", show_default=False
    ),
    output: OutputFormat = OUTPUT_OPT,
) -> None:
    """Copy a run's output here from any target: the final model (model.safetensors + model.json), summary.json,
    metrics and TensorBoard. Local and SLURM (through slurm.login) copy the folder, SageMaker unpacks
    model.tar.gz from S3, Kubernetes reads it off the PVC through a short-lived reader pod's log (its top-level
    files, up to 6 MiB)."""
    run = _run(run_id)
    folder = run.pull(dest)
    files = sorted(str(p.relative_to(folder)) for p in folder.rglob("*") if p.is_file())
    if output is OutputFormat.json:
        print_json({"id": run.id, "dir": str(folder), "files": files})
        return
    typer.echo(f"{run.id}: {len(files)} file(s) in {folder}")
    model = json.loads((folder / "model.json").read_text()) if (folder / "model.json").is_file() else None
    if model:
        typer.echo(f"  model: {folder / model['file']} ({model['model']}, step {model['step']}); load it as "
                   "docs/trainer.md \"The final model\" shows")  # fmt: skip
    else:
        typer.echo("  no model.json: the run wrote no final model (it did not finish, or it is a `command:` job)")


@handles_errors
def cancel(run_id: str = RUN_ARG, output: OutputFormat = OUTPUT_OPT) -> None:
    """Stop the run (or every trial of a sweep:<id>): SIGTERM first so the trainer checkpoints, then whatever it
    takes. With --output json: the run's record and its status after the cancel, as `status` prints them."""
    as_json = output is OutputFormat.json
    if run_id.startswith("sweep:"):
        from .sweeps import cancel_sweep

        cancel_sweep(run_id, as_json)
        return
    run = _run(run_id)
    run.cancel()
    try:
        found: dict[str, Any] = run.status().to_dict()
    except Exception:  # the cancel happened; a status that cannot be read now is not a failure of it
        found = {"state": "cancel requested"}
    if as_json:
        print_json({**run.record(), **found})
    else:
        typer.echo(f"{run.id}: {found['state']}")


@handles_errors
def list_runs(
    target: str | None = typer.Option(None, "--target", "-t", help="Only runs on this target."),
    state: str | None = typer.Option(None, "--state", help="Only runs in this last known state."),
    limit: int = typer.Option(50, "--limit", "-L", min=1, help="At most this many, newest first (gh's -L)."),
    refresh: bool = typer.Option(
        False, "--refresh", help="Ask the engines for unfinished runs' states first (local runs are always read)."
    ),
    output: OutputFormat = OUTPUT_OPT,
) -> None:
    """Runs submitted from this machine, on every target, newest first: local runs as they are now, the others
    with their last known state (--refresh asks their engines)."""
    from .listing import list_runs as listed

    listed(target, state, limit, refresh, output)

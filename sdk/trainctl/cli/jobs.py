"""Commands on a job file: validate, render, submit, schema, init."""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Any

import typer

from .common import OutputFormat, handles_errors, load_job, output_option, print_json
from .validate_render import render_job, validate_job, warn

JOB_ARG = typer.Argument(..., metavar="JOB", help="The job file (YAML).", show_default=False)
SET_OPT = typer.Option(
    [], "--set", "-s", metavar="KEY.PATH=VALUE", help="Override a field, e.g. --set trainer.epochs=3 (repeatable)."
)
OUTPUT_OPT = output_option()
OPTION_OPT = typer.Option(
    [],
    "--option",
    "-O",
    metavar="KEY=VALUE",
    help="A submit option of the target, e.g. -O via=estimator or -O local=true (sagemaker), -O force=true "
    "(kubernetes); the value is read as YAML. Each target declares its options; an unknown one is refused "
    "(repeatable).",
)


def _target_opt(default: str | None) -> Any:
    from ..targets.registry import names_text

    return typer.Option(default, "--target", "-t", help=f"{names_text()}.")


@handles_errors
def validate(
    job_file: Path = JOB_ARG,
    target: str = typer.Option(
        "local", "--target", "-t", help="Check what submit to this target checks (submit's default too)."
    ),
    overrides: list[str] = SET_OPT,
    output: OutputFormat = OUTPUT_OPT,
    options: list[str] = OPTION_OPT,
) -> None:
    """Check a job file as `submit --target` would, without submitting: its fields, the target's section, the
    code folder, the command's script, the trainer's model, the local target's data files, and the render."""
    validate_job(job_file, target, overrides, output, options)


@handles_errors
def render(
    job_file: Path = JOB_ARG,
    target: str = _target_opt("local"),
    out: Path | None = typer.Option(None, "-o", "--out", help="Write the artifact to this file instead of stdout."),
    overrides: list[str] = SET_OPT,
    output: OutputFormat = output_option("text: the artifact's own bytes; json: its native object."),
) -> None:
    """Show exactly what a target would run (pure: nothing is submitted)."""
    render_job(job_file, target, out, overrides, output)


@handles_errors
def submit(
    job_file: Path = JOB_ARG,
    target: str = _target_opt("local"),
    wait: bool = typer.Option(False, "--wait", "-w", help="Stream the log and end with the run's outcome."),
    overrides: list[str] = SET_OPT,
    output: OutputFormat = OUTPUT_OPT,
    options: list[str] = OPTION_OPT,
    resume_from: str | None = typer.Option(
        None,
        "--resume-from",
        metavar="RUN|s3://PREFIX",
        help="Continue this recorded run here, or the checkpoints under an S3 prefix (what checkpoint.dir: "
        "s3://... mirrors, from any target): the newest that verifies is copied to the target's checkpoint "
        "location first (docs/resume.md).",
    ),
) -> None:
    """Submit the job to a target and print the run id (with --wait: follow it to the end)."""
    from ..spec.loading import parse_options

    job = load_job(job_file, overrides)
    given = parse_options(options)
    warn(job, target)
    run = job.submit(target, resume_from=resume_from, **given)
    if output is OutputFormat.json and not wait:
        print_json(run.record())
        return
    typer.echo(f"submitted {run.id}", err=wait)
    came = run.resumed_from
    if came is not None:
        typer.echo(f"  resuming {came.run} from {came.checkpoint} (copied to {came.copied_to})", err=True)
        if came.changes:
            typer.echo(f"  changed since that checkpoint: {', '.join(came.changes)}", err=True)
    if not wait:
        typer.echo(f"  follow it: trainctl logs {run.id} --follow", err=True)
        return
    raise typer.Exit(follow_to_end(run, as_json=output is OutputFormat.json))


def follow_to_end(run: Any, as_json: bool = False) -> int:
    """Stream the log until the run ends, then print its outcome; the exit code says how it ended."""
    from ..runs.state import RunState

    started = time.monotonic()
    try:
        for line in run.logs(follow=True):
            print(line, file=sys.stderr if as_json else sys.stdout, flush=True)
        status = run.wait(poll=0.5)
    except KeyboardInterrupt:  # not an error: the user stopped watching (as `kubectl logs -f` and `gh run watch`)
        typer.echo(f"\nstopped following {run.id}; the run goes on. Cancel it with: trainctl cancel {run.id}", err=True)
        raise typer.Exit(130) from None
    summary = _summary(run)
    if as_json:
        print_json({**run.record(), **status.to_dict(), "summary": summary})
    else:
        _print_outcome(run, status, summary, time.monotonic() - started)
    return 0 if status.state is RunState.SUCCEEDED else 1


def _summary(run: Any) -> dict[str, Any] | None:
    summary: dict[str, Any] | None = run.summary()
    return summary


def _print_outcome(run: Any, status: Any, summary: dict[str, Any] | None, seconds: float) -> None:
    from rich.console import Console

    console = Console(highlight=False, soft_wrap=True)
    color = {"succeeded": "green", "failed": "red", "cancelled": "yellow"}.get(status.state.value, "white")
    reason = f" ({status.reason})" if status.reason else ""
    console.print(f"[bold {color}]{run.id} {status.state.value}[/] after {seconds:.1f}s{reason}")
    if summary:
        from ..runs.outputs import accuracy_line

        if accuracy := accuracy_line(summary):
            console.print(f"  [bold]{accuracy}[/]")
        console.print(f"  steps: {summary.get('steps')}, world size {summary.get('world_size')}")
        if summary.get("checkpoint"):
            console.print(f"  latest checkpoint: {summary['checkpoint']}")
        if summary.get("model"):
            console.print(f"  final model: {summary['model']} (`trainctl pull {run.id}` copies the output here)")
    ckpt = run.paths.checkpoint_dir
    if ckpt and (summary or (Path(ckpt).is_dir() and any(Path(ckpt).iterdir()))):
        console.print(f"  checkpoints in: {ckpt}")
    if run.paths.output_dir:
        console.print(f"  output in: {run.paths.output_dir}")
    if status.state.value != "succeeded" and run.paths.log:
        console.print(f"  log: {run.paths.log}")


@handles_errors
def schema(
    fmt: str = typer.Option("json", "--format", help="json (the JSON Schema) or markdown (the reference)."),
    out: Path | None = typer.Option(None, "-o", "--out", help="Write to this file instead of stdout."),
) -> None:
    """Print the job file's JSON Schema (for editor completion) or its Markdown reference."""
    from ..errors import UsageError
    from ..targets.base import json_text
    from .schema_doc import job_schema, markdown

    if fmt not in ("json", "markdown"):
        raise UsageError([f"--format: got {fmt!r}; expected json or markdown"])
    text = json_text(job_schema()) if fmt == "json" else markdown()
    if out is not None:
        out.write_text(text)
        typer.echo(f"wrote {out}", err=True)
    else:
        sys.stdout.write(text)


@handles_errors
def init(
    path: Path = typer.Argument(Path("job.yaml"), metavar="PATH", help="Where to write the starter job file."),
    name: str | None = typer.Option(None, "--name", help="Job name; default: from the file name."),
    force: bool = typer.Option(False, "--force", help="Overwrite an existing file."),
) -> None:
    """Write a commented starter job file to edit."""
    from ..errors import UsageError
    from ..job import Job
    from ..spec.names import mended
    from .starter import starter

    if path.exists() and not force:
        raise UsageError([f"{path} already exists; pass --force to overwrite it"])
    job_name = name or mended(path.stem) or "my-job"
    text = starter(job_name, path.name)
    Job.from_yaml_text(text, str(path))  # never write a starter that does not validate (e.g. a bad --name)
    path.write_text(text)
    data = path.parent / "data" / "digits"  # the template's data, relative to the job file
    typer.echo(f"wrote {path}; next: make its demo data with `python -m trainer.examples.digits_data {data}`,")
    typer.echo(f"  then check it as submit would: trainctl validate {path}")

"""`trainctl k8s ...`: the Kubernetes (Kubeflow TrainJob / PyTorchJob) command group. Thin: parse, call the runner or
the run handle (as every other command does), print."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import typer

from .common import OutputFormat, handles_errors, load_job, output_option, print_json

app = typer.Typer(
    help="Kubernetes (Kubeflow TrainJob or PyTorchJob): apply, render, cp-data, status, logs, delete, list.",
    no_args_is_help=True,
)

JOB_ARG = typer.Argument(
    ..., exists=False, dir_okay=False, metavar="JOB", help="The job file (YAML).", show_default=False
)
NAME_ARG = typer.Argument(
    ...,
    metavar="NAME",
    help="TrainJob or PyTorchJob name (or a run id kubernetes:<namespace>/<name>).",
    show_default=False,
)
CONTEXT_OPT = typer.Option(None, "--context", help="kubeconfig context; default: the job's, else the current one.")
NAMESPACE_OPT = typer.Option(None, "--namespace", "-n", help="Namespace; default: the job's kubernetes.namespace.")
# The commands that take a NAME, not a job file: their defaults are kubeconfig's and trainctl's, not a job's.
CURRENT_CONTEXT_OPT = typer.Option(None, "--context", help="kubeconfig context; default: the current one.")
NAME_NAMESPACE_OPT = typer.Option(
    None, "--namespace", "-n", help="Namespace; default: kubernetes.namespace's default (trainctl)."
)
SET_OPT = typer.Option(
    None, "--set", metavar="KEY.PATH=VALUE", help="Override a job field: key.path=value (repeatable)."
)
OUTPUT_OPT = output_option()


def _job(path: Path, overrides: list[str] | None, context: str | None, namespace: str | None) -> Any:
    sets = list(overrides or [])
    if context:
        sets.append(f"kubernetes.context={context}")
    if namespace:
        sets.append(f"kubernetes.namespace={namespace}")
    return load_job(path, sets)


def _run(name: str, context: str | None, namespace: str | None) -> Any:
    """A handle for NAME in the namespace (default: the section's default), or the recorded run for a run id."""
    from ..run import Run
    from ..targets.kubernetes.section import KubernetesSection

    if name.startswith("kubernetes:"):
        run = Run.from_id(name)
    else:
        ns = namespace or KubernetesSection().namespace
        run = Run.from_id(f"kubernetes:{ns}/{name}")
    if context:
        run = run.model_copy(update={"handle": run.handle.model_copy(update={"context": context})})
    if namespace and name.startswith("kubernetes:") and not run.native_id.startswith(f"{namespace}/"):
        run = run.model_copy(update={"native_id": f"{namespace}/{run.native_id.partition('/')[2]}"})
    return run


@app.command()
@handles_errors
def render(
    job_file: Path = JOB_ARG,
    overrides: list[str] = SET_OPT,
    context: str | None = CONTEXT_OPT,
    namespace: str | None = NAMESPACE_OPT,
) -> None:
    """Print the TrainJob (or PyTorchJob, kubernetes.api) manifest (nothing is sent to a cluster)."""
    from ..targets.lookup import render as render_job

    rendered = render_job(_job(job_file, overrides, context, namespace), "kubernetes")
    sys.stdout.write(rendered.text)
    for note in rendered.notes:
        typer.echo(f"# note: {note}", err=True)


@app.command()
@handles_errors
def apply(
    job_file: Path = JOB_ARG,
    overrides: list[str] = SET_OPT,
    context: str | None = CONTEXT_OPT,
    namespace: str | None = NAMESPACE_OPT,
    dry_run: bool = typer.Option(
        False, "--dry-run", help="Server-side dry run: validated by the API server, not stored."
    ),
    force: bool = typer.Option(False, "--force", help="Take over fields another field manager owns."),
    output: OutputFormat = OUTPUT_OPT,
) -> None:
    """Create or update the job's TrainJob/PyTorchJob, named as the job, by server-side apply: that object is the
    run (`trainctl submit -t kubernetes` instead creates a new object <name>-<4 hex> for each run)."""
    from ..submit.runner import submit
    from ..targets.kubernetes.handle import KubernetesHandle

    job = _job(job_file, overrides, context, namespace)
    run = submit(job, "kubernetes", force=force, apply=True, dry_run=dry_run)  # a dry run is not recorded
    if output is OutputFormat.json:
        print_json(run.record())
        return
    suffix = " (server dry run)" if dry_run else ""
    handle = KubernetesHandle.of(run)
    resource = "trainjob.trainer.kubeflow.org" if handle.api == "trainjob" else "pytorchjob.kubeflow.org"
    typer.echo(f"{resource}/{job.name} {handle.apply}{suffix}: {run.id}")


@app.command("cp-data")
@handles_errors
def cp_data(
    job_file: Path = JOB_ARG,
    overrides: list[str] = SET_OPT,
    context: str | None = CONTEXT_OPT,
    namespace: str | None = NAMESPACE_OPT,
    print_only: bool = typer.Option(
        False, "--print", help="Print the kubectl commands that do the copy by hand instead (nothing is sent)."
    ),
    timeout: float = typer.Option(600.0, "--timeout", help="Seconds to wait for the copy pod to finish."),
) -> None:
    """Copy the job's local data (its relative data: paths, from the job file's folder) onto its PVC, where its
    pods read them: as `kubectl cp`, through a short-lived pod that mounts the claim, deleted after. Data too
    large to carry (over 32 MiB compressed) gets the kubectl commands printed instead, and exit 1."""
    from ..targets.kubernetes.cp_data import copy_data

    job = _job(job_file, overrides, context, namespace)
    done = copy_data(job, print_only=print_only, timeout=timeout)
    if not done.inputs:
        typer.echo(
            "nothing to copy: no data input is a relative path (s3://, pvc:// and absolute paths stay)", err=True
        )
        return
    if done.commands is not None:
        sys.stdout.write(done.commands)
        if done.why_not:
            typer.echo(f"not copied: {done.why_not}; run the commands above from the job file's folder", err=True)
            raise typer.Exit(1)
        return
    sec = job.section("kubernetes")
    for found in done.inputs:
        typer.echo(f"copied data.{found.name}: {found.given} -> PVC {sec.pvc}:{found.inside}")
    typer.echo(f"  {done.size:,} bytes compressed in {done.parts} part(s), through pod {done.pod} (deleted)", err=True)


@app.command()
@handles_errors
def status(
    name: str = NAME_ARG,
    context: str | None = CURRENT_CONTEXT_OPT,
    namespace: str | None = NAME_NAMESPACE_OPT,
    output: OutputFormat = OUTPUT_OPT,
) -> None:
    """The job's state from its conditions and pod phases, with the last condition's reason and message."""
    run = _run(name, context, namespace)
    st = run.status()  # also saves the state in the run store
    if output is OutputFormat.json:
        print_json({"id": run.id, **st.to_dict()})
        return
    typer.echo(f"{run.id}  {st.state.value} ({st.native_state})")
    if st.reason:
        typer.echo(f"  reason: {st.reason}")
    for pod, phase in st.details.get("pods", {}).items():
        typer.echo(f"  {pod}: {phase}")
    from ..runs.image_ids import image_lines

    for line in image_lines(st.images):
        typer.echo(f"  {line}")


@app.command()
@handles_errors
def logs(
    name: str = NAME_ARG,
    rank: int | None = typer.Option(None, "--rank", min=0, help="Only this node rank (Master is 0 when present)."),
    follow: bool = typer.Option(False, "--follow", "-f", help="Keep streaming until the pods end."),
    context: str | None = CURRENT_CONTEXT_OPT,
    namespace: str | None = NAME_NAMESPACE_OPT,
) -> None:
    """Print the pods' logs, each line prefixed by its node rank."""
    run = _run(name, context, namespace)
    try:
        for line in run.logs(follow=follow, rank=rank):
            sys.stdout.write(line + "\n")
            sys.stdout.flush()
    except BrokenPipeError:  # `trainctl k8s logs ... | head`
        sys.stderr.close()


@app.command()
@handles_errors
def delete(
    name: str = NAME_ARG, context: str | None = CURRENT_CONTEXT_OPT, namespace: str | None = NAME_NAMESPACE_OPT
) -> None:
    """Delete the TrainJob or PyTorchJob (its operator then removes its pods)."""
    from ..runs.state import RunState
    from ..runs.store import RunStore

    run = _run(name, context, namespace)
    run.cancel()
    RunStore().update_state(run.id, RunState.CANCELLED)
    typer.echo(f"{run.native_id.partition('/')[2]} deleted")


@app.command(name="list")
@handles_errors
def list_jobs(
    context: str | None = CURRENT_CONTEXT_OPT,
    namespace: str | None = NAME_NAMESPACE_OPT,
    output: OutputFormat = OUTPUT_OPT,
) -> None:
    """The TrainJobs and PyTorchJobs in the namespace, with their states."""
    from ..targets.kubernetes.target import KubernetesTarget
    from ..targets.lookup import get_target

    kube = get_target("kubernetes")
    assert isinstance(kube, KubernetesTarget)
    rows = kube.list_jobs(context, namespace)
    if output is OutputFormat.json:
        print_json(rows)
        return
    if not rows:
        typer.echo("no TrainJobs or PyTorchJobs")
        return
    width = max(len(str(r["name"])) for r in rows)
    typer.echo(f"{'NAME':<{width}}  {'KIND':<10} {'STATE':<10} {'CONDITION':<11} CREATED")
    for r in rows:
        typer.echo(f"{r['name']:<{width}}  {r['kind']:<10} {r['state']:<10} {r['condition']:<11} {r['created']}")

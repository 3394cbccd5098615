"""The typer app behind `trainctl`. Only typer is imported up front, so `trainctl --help` stays fast
and never loads torch or an engine library; `trainctl.cli.main` is the entry point."""

from __future__ import annotations

import typer

from . import jobs, k8s, removal, runs, sweeps


def _flags_show_no_type() -> None:
    """typer's rich help prints a flag's type as if it took a value (`--wait -w <bool>`, `--help -h <bool>`);
    a flag takes none, so nothing is printed there, as in `gh`, `kubectl` and `docker` help."""
    from typer.core import TyperOption

    shown = TyperOption.display_type_rich
    if getattr(shown, "_trainctl", False):
        return

    def display_type_rich(self: TyperOption, ctx: typer.Context) -> str | None:
        return None if self.is_flag else shown(self, ctx)

    display_type_rich._trainctl = True  # type: ignore[attr-defined]
    TyperOption.display_type_rich = display_type_rich  # type: ignore[method-assign,assignment]


_flags_show_no_type()

app = typer.Typer(
    name="trainctl",
    help="Define a PyTorch distributed training job once; run it locally, on SLURM, Kubernetes or SageMaker.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    context_settings={"help_option_names": ["-h", "--help"]},
)


def _version(value: bool) -> None:
    if value:
        from ..version import __version__

        typer.echo(f"trainctl {__version__}")
        raise typer.Exit(0)


@app.callback()
def _root(
    version: bool = typer.Option(False, "--version", callback=_version, is_eager=True, help="Print the version."),
) -> None:
    """Exit codes: 0 success, 2 invalid input, 1 engine or runtime failure."""


app.command(rich_help_panel="Jobs")(jobs.validate)
app.command(rich_help_panel="Jobs")(jobs.render)
app.command(rich_help_panel="Jobs")(jobs.submit)
app.command(rich_help_panel="Runs")(runs.status)
app.command(rich_help_panel="Runs")(runs.logs)
app.command(rich_help_panel="Runs")(runs.metrics)
app.command(rich_help_panel="Runs")(runs.pull)
app.command(rich_help_panel="Runs")(runs.cancel)
app.command(name="list", rich_help_panel="Runs")(runs.list_runs)
app.command(rich_help_panel="Runs")(removal.rm)
app.command(rich_help_panel="Runs")(removal.prune)
app.command(rich_help_panel="Job files")(jobs.schema)
app.command(rich_help_panel="Job files")(jobs.init)
app.add_typer(sweeps.app, name="sweep", rich_help_panel="Jobs")
app.add_typer(k8s.app, name="k8s", rich_help_panel="Targets")


__all__ = ["app"]

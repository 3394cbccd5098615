"""`trainctl k8s ...`: the Kubernetes command group (filled by the Kubernetes target's work)."""

from __future__ import annotations

import typer

app = typer.Typer(
    help="Kubernetes (Kubeflow PyTorchJob): apply, render, status, logs, delete, list.", no_args_is_help=True
)

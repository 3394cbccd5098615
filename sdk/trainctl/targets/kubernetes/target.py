"""The Kubernetes target: a Kubeflow PyTorchJob. Render is pure; the engine side imports `kubernetes` lazily."""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from .render import build_manifest, render, webhook_problems

if TYPE_CHECKING:
    from ...job import Job
    from ...run import Run, RunStatus

__all__ = ["build_manifest", "cancel", "logs", "render", "status", "submit", "webhook_problems"]


def submit(job: Job, **options: Any) -> Run:
    """Server-side apply the job's PyTorchJob (options: context, namespace, kubeconfig, dry_run, force)."""
    from .engine import submit as _submit

    return _submit(job, **options)


def status(run: Run) -> RunStatus:
    from .engine import status as _status

    return _status(run)


def logs(run: Run, follow: bool = False, rank: int | None = None) -> Iterator[str]:
    from .engine import logs as _logs

    yield from _logs(run, follow=follow, rank=rank)


def cancel(run: Run) -> None:
    from .engine import cancel as _cancel

    _cancel(run)

"""Find a target by name: its plug-in's `Target` (targets/registry.py), imported on first use; and render a job on it."""

from __future__ import annotations

import importlib
from dataclasses import replace
from functools import cache
from typing import TYPE_CHECKING

from .base import Target
from .registry import PluginError, canonical, plugin

if TYPE_CHECKING:
    from ..spec.job_spec import JobSpec
    from .base import Rendered


@cache
def get_target(name: str) -> Target:
    """The target called `name` (its package is imported now, so unused targets cost nothing)."""
    where = plugin(name).target
    module, _, attribute = where.partition(":")
    try:
        target = getattr(importlib.import_module(module), attribute or "TARGET")
    except (ImportError, AttributeError) as exc:
        raise PluginError(f"target {name!r}: {where} does not load: {exc}") from exc
    if not isinstance(target, Target) or target.name != name:
        raise PluginError(f"target {name!r}: {where} is not a Target named {name!r}")
    return target


def render(job: JobSpec, target: str = "local") -> Rendered:
    """The target's exact artifact for the job: its code bundle prepared first, then render (pure). Here and not in
    submit/runner.py, so a render loads nothing of submit's (preflight, trackers, the run store)."""
    from ..submit.bundle import prepare

    rendered = get_target(canonical(target)).render(prepare(job))
    if job.function is None:
        return rendered
    return replace(rendered, notes=(*rendered.notes, job.function.describe()))  # what is shipped, by name

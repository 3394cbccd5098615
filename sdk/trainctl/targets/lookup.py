"""Find a target by name: its plug-in's `Target` (registry.py), imported on first use."""

from __future__ import annotations

import importlib
from functools import cache

from ..registry import PluginError, plugin
from .base import Target


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

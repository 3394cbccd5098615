"""Find a target by name: the row of targets/table.py, its `TARGET` loaded on first use."""

from __future__ import annotations

import importlib
from functools import cache

from ..errors import JobError, did_you_mean
from .base import Target
from .table import NAMES, ROWS


@cache
def get_target(name: str) -> Target:
    """The target called `name` (its package is imported now, so unused targets cost nothing)."""
    row = ROWS.get(name)
    if row is None:
        raise JobError([f"target: got {name!r}{did_you_mean(name, NAMES)}; expected one of {', '.join(NAMES)}"])
    target = importlib.import_module(row.module).TARGET
    assert isinstance(target, Target) and target.name == name, f"{row.module}.TARGET is not the {name} target"
    return target

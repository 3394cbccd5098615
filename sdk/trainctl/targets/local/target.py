"""The local target: render (render.py, pure) and the detached-process engine (engine.py)."""

from __future__ import annotations

from .engine import cancel, describe, logs, status, submit, summary
from .render import render

__all__ = ["cancel", "describe", "logs", "render", "status", "submit", "summary"]

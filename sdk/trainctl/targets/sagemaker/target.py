"""The SageMaker target: render (render.py, pure) and the boto3 engine (engine.py)."""

from __future__ import annotations

from .engine import cancel, logs, status, submit
from .render import render

__all__ = ["cancel", "logs", "render", "status", "submit"]

"""`trainctl`: the command line. Thin: parse, call the SDK, print.

The typer app lives in `typer_app` and is loaded on first use, so `import trainctl.cli` costs nothing.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .typer_app import app


def __getattr__(name: str) -> Any:
    if name == "app":
        from .typer_app import app

        return app
    raise AttributeError(f"module 'trainctl.cli' has no attribute {name!r}")


def main() -> None:
    """Console-script entry point: `validate`, `render` and `list` start without typer (cli/fast.py)."""
    from .fast import main as start

    start()


__all__ = ["app", "main"]

"""`trainctl`: the command line. Thin: parse, call the SDK, print.

Nothing is imported up front: `main` answers the plain forms of `trainctl list` without typer (its
option processing loads pydantic, most of the command's time; docs/benchmarks.md) and hands every
other command line to the typer app (`trainctl.cli.typer_app`, loaded on first use)."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .typer_app import app


def __getattr__(name: str) -> Any:
    if name == "app":
        from .typer_app import app

        return app
    raise AttributeError(f"module 'trainctl.cli' has no attribute {name!r}")


def main() -> None:
    """Console-script entry point."""
    from .quick_list import try_list

    if try_list(sys.argv[1:]):
        return
    from .typer_app import app

    app()


__all__ = ["app", "main"]

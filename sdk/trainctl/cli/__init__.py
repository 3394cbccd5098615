"""`trainctl`: the command line. Thin: parse, call the SDK, print.

The typer app lives in `typer_app` and is loaded on first use, so `import trainctl.cli` costs nothing.
"""

from __future__ import annotations

import os
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
    # The first pydantic model built scans every installed package's entry points for pydantic plug-ins
    # (pydantic/plugin/_loader.py, `get_plugins`): a tenth of a render here, for plug-ins the CLI has no use
    # for. Off for this process unless the user set PYDANTIC_DISABLE_PLUGINS; the SDK in a notebook is untouched.
    os.environ.setdefault("PYDANTIC_DISABLE_PLUGINS", "__all__")
    from .no_plugins import install

    install()  # with the plug-ins off, pydantic's loader need not import importlib.metadata (cli/no_plugins.py)
    import warnings

    warnings.showwarning = _say  # the SDK's warnings, as a CLI says them: one line, no source line
    from .fast import main as start

    start()


def _say(message: Warning | str, category: type[Warning], *_: object, **__: object) -> None:
    import sys

    print(f"warning: {message}", file=sys.stderr)


__all__ = ["app", "main"]

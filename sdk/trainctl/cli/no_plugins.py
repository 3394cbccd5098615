"""pydantic's plug-in loader, for a CLI process in which pydantic's plug-ins are off.

pydantic imports `get_plugins` from pydantic/plugin/_loader.py when it builds its first model
(pydantic/plugin/_schema_validator.py, `create_schema_validator`), and that module imports importlib.metadata at
its top: ~15 ms of a render here (zipfile, email, csv), although with PYDANTIC_DISABLE_PLUGINS set to `__all__`,
`1` or `true` its `get_plugins` returns () before it reads a single entry point. cli/__init__.py puts this
module in its place for such a process (`install`): it answers the same (), and any other name asked of it comes
from pydantic's own loader, imported then.
"""

from __future__ import annotations

import os
import sys
from typing import Any

LOADER = "pydantic.plugin._loader"
OFF = ("__all__", "1", "true")  # the values for which pydantic's get_plugins returns () at once


def get_plugins() -> tuple[()]:
    """No plug-ins: what pydantic's own get_plugins returns with PYDANTIC_DISABLE_PLUGINS in OFF."""
    return ()


def install() -> bool:
    """Stand in for pydantic's loader if the plug-ins are off and pydantic has not loaded its own; whether it did."""
    if os.environ.get("PYDANTIC_DISABLE_PLUGINS") not in OFF or LOADER in sys.modules:
        return False
    sys.modules[LOADER] = sys.modules[__name__]
    return True


def __getattr__(name: str) -> Any:
    """A name this stand-in lacks (a later pydantic's): the real loader takes its place and answers."""
    import importlib

    if name.startswith("__"):  # the import system's own questions (`__path__`...): a plain module's answers
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    if sys.modules.get(LOADER) is sys.modules[__name__]:
        del sys.modules[LOADER]
    return getattr(importlib.import_module(LOADER), name)

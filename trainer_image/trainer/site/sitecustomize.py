"""Put on a torchrun worker's PYTHONPATH by trainer-launch (first_failure.py): a Python `command:` program's
uncaught exception goes to torch's error file, as `@record` would write it, without the program changing.

torchrun gives each worker `TORCHELASTIC_ERROR_FILE`; `ErrorHandler.record_exception`
(torch/distributed/elastic/multiprocessing/errors/error_handler.py) writes `{type}: {message}` and the
traceback there, and the agent's `ChildFailedError` reads it back. This file is a top-level module in the
worker's own Python (a venv may lack the trainer package), so it imports nothing of trainctl, and torch
only when an exception is recorded.
"""

from __future__ import annotations

import os
import sys
from types import TracebackType

_PREVIOUS = sys.excepthook


def _record(kind: type[BaseException], value: BaseException, tb: TracebackType | None) -> None:
    try:
        from torch.distributed.elastic.multiprocessing.errors import get_error_handler

        try:
            raise value.with_traceback(tb)
        except BaseException as raised:  # inside an except block: its traceback is the one written
            get_error_handler().record_exception(raised)
    except Exception:  # no torch in this Python: the launcher reads the last lines instead
        pass
    _PREVIOUS(kind, value.with_traceback(tb), tb)  # the traceback as raised, without this hook's frame


if os.environ.get("TORCHELASTIC_ERROR_FILE"):
    sys.excepthook = _record

"""A tiny file through which workers tell the launcher why they stopped.

torchrun reports only "a worker failed"; when the launcher itself got the SIGTERM it does not
even see the workers' exit codes. Workers therefore record `preempted` or `bad_input` (with the
message) in `$TRAINER_STATUS_FILE`, and the launcher turns that into its own exit code.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

ENV = "TRAINER_STATUS_FILE"


def write_status(status: str, message: str = "") -> None:
    path = os.environ.get(ENV)
    if not path:
        return
    try:
        tmp = Path(f"{path}.{os.getpid()}.tmp")
        tmp.write_text(json.dumps({"status": status, "message": message}))
        os.replace(tmp, path)
    except OSError:
        pass  # best effort: the exit code still carries the outcome


def read_status(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text())
        return data if isinstance(data, dict) else {}
    except (OSError, ValueError):
        return {}

"""Files a pod printed to its log as base64 lines (trainer/log_frames.py, their one writer), joined again.

The API server serves a pod's log (the pods/log subresource) to whoever may read it, from outside the cluster
too, while the files themselves sit on a volume only a pod can read: a function's results (runs/results.py)
and a finished run's output for `trainctl pull` (targets/kubernetes/output_pull.py) come back this way.
"""

from __future__ import annotations

import base64
import re
from collections.abc import Iterable


def log_files(lines: Iterable[str], mark: str, names: str = r"\S+") -> dict[str, bytes]:
    """The files framed as `MARK NAME I/N CHUNK` lines whose NAME matches `names`, whole files only (a file
    with a chunk missing is left out); a later run of a file's lines (a later attempt's) replaces an earlier one."""
    pattern = re.compile(rf"{re.escape(mark)} ({names}) (\d+)/(\d+) ([A-Za-z0-9+/=]*)$")
    parts: dict[str, dict[int, str]] = {}
    counts: dict[str, int] = {}
    for line in lines:
        match = pattern.search(line)
        if match is None:
            continue
        name, index, count, chunk = match.group(1), int(match.group(2)), int(match.group(3)), match.group(4)
        if index == 1:
            parts[name] = {}
        parts.setdefault(name, {})[index] = chunk
        counts[name] = count
    return {
        name: base64.b64decode("".join(got[i] for i in range(1, counts[name] + 1)))
        for name, got in parts.items()
        if len(got) == counts[name] and set(got) == set(range(1, counts[name] + 1))
    }

"""Files as base64 lines in a pod's log, so that they come back through the API server (`GET
/api/v1/namespaces/{ns}/pods/{name}/log`, the pods/log subresource) from outside the cluster, where the
files themselves sit on a volume only a pod can read. One framing for every such file: a function's results
(function.py) and a finished run's output for `trainctl pull` (output_log.py). The SDK's runs/results.py
`log_files` joins the lines again; this is its only writer (the trainer never imports the SDK).

Each file is `MARK NAME I/N CHUNK` lines, I from 1 to N, each under the worker's 64 KiB line limit
(worker_output.py); an empty file is one line with an empty chunk.
"""

from __future__ import annotations

import base64
from collections.abc import Mapping

CHUNK = 48 * 1024


def print_files(mark: str, files: Mapping[str, bytes]) -> None:
    """Each file as `MARK NAME I/N CHUNK` lines on stdout, flushed line by line (a name holds no white space)."""
    for name, data in files.items():
        encoded = base64.b64encode(data).decode()
        chunks = [encoded[i : i + CHUNK] for i in range(0, len(encoded), CHUNK)] or [""]
        for index, chunk in enumerate(chunks):
            print(f"{mark} {name} {index + 1}/{len(chunks)} {chunk}", flush=True)

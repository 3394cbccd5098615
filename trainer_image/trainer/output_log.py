"""`python -m trainer.output_log FOLDER LIMIT`: a finished run's output folder, printed to this pod's log for
`trainctl pull` on Kubernetes (the SDK's targets/kubernetes/output_pull.py starts this pod).

The folder sits on the run's PVC, which only a pod can read; `kubectl cp` would need pods/exec. The log
needs no more than pods/log, which the SDK already reads (a function's results come back the same way,
log_frames.py). Sent, in this order while their sum stays within LIMIT bytes: `model.json`, the weights it
names, then the folder's other top-level files by name. Last comes `.manifest` (JSON): every top-level
file's size, and for each sent one its sha256, so the SDK checks what it joined and names what was left out.
Exit 3 when the folder does not exist (the log's last line says so).
"""

from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path

from .log_frames import print_files

MARK = "trainctl-output-file"
MANIFEST = ".manifest"
MODEL_JSON = "model.json"  # training/final_model.py JSON_NAME (not imported: that module loads torch)


def _order(folder: Path) -> tuple[list[Path], list[str]]:
    """The top-level regular files, model first; and the weights model.json names that are missing."""
    found = {
        p.name: p
        for p in folder.iterdir()
        if p.is_file() and not p.is_symlink() and not p.name.startswith(".") and not any(c.isspace() for c in p.name)
    }
    first, missing = [], []
    if MODEL_JSON in found:
        first.append(MODEL_JSON)
        try:
            weights = str(json.loads(found[MODEL_JSON].read_bytes()).get("file") or "")
        except (ValueError, AttributeError):
            weights = ""
        if weights in found:
            first.append(weights)
        elif weights:
            missing.append(weights)
    return [found[n] for n in first] + [found[n] for n in sorted(found) if n not in first], missing


def main(argv: list[str]) -> int:
    """Print the folder's files (within the limit) and its manifest; 3 when the folder is missing."""
    folder, limit = Path(argv[0]), int(argv[1])
    if not folder.is_dir():
        print(f"{MARK}: no folder {folder}", flush=True)
        return 3
    files, missing = _order(folder)
    manifest: dict[str, object] = {"folder": str(folder), "limit": limit, "missing": missing, "files": {}}
    listed: dict[str, dict[str, object]] = {}
    total = 0
    for path in files:
        size = path.stat().st_size
        entry: dict[str, object] = {"size": size}
        if total + size <= limit:
            data = path.read_bytes()
            entry = {"size": len(data), "sha256": hashlib.sha256(data).hexdigest()}
            total += len(data)
            print_files(MARK, {path.name: data})
        listed[path.name] = entry
    manifest["files"] = listed
    print_files(MARK, {MANIFEST: json.dumps(manifest, sort_keys=True).encode()})
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

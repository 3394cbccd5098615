"""A function job's program (`python -m trainer.function`): load the shipped call, run it, write what it gave.

The SDK (Job.with_function) pickles `(fn, args, kwargs)` with cloudpickle into the code bundle at PAYLOAD; the
launcher verifies the bundle's sha256 and, through `check`, the payload's and the submitting side's Python and
cloudpickle versions on every node before any process starts (a mismatch is invalid input, exit 2, never retried).
Each rank writes `rank-<N>.pkl` (its value, or its exception) and `rank-<N>.json` (ok, the pickle's sha256, the
type, message and formatted traceback) into `$TRAINER_OUTPUT_DIR/function/`, atomically; the SDK reads them
back (runs/results.py) and loads a pickle only when its sha256 matches. A copy of the SDK's names, never an import.
"""

from __future__ import annotations

import hashlib
import json
import os
import pickle
import sys
import traceback
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from .errors import TrainerInputError
from .gc_pause import paused_gc
from .log_frames import print_files
from .quick_exit import exit_without_teardown

PAYLOAD = ".trainctl/function.pkl"
ITEMS, ENV_ITEM = ".trainctl/items.pkl", "TRAINER_FUNCTION_ITEM"  # `map`: this trial's keyword arguments
RESULTS = "function"
LOG_ENV, LOG_MARK, LOG_MAX = "TRAINER_FUNCTION_LOG", "trainctl-function-result", 4 << 20
"""Kubernetes: the result also goes to the pod's log, in base64 lines (log_frames.py), so that it comes back
from outside the cluster (a termination message holds 4 KB)."""
ENV_SHA, ENV_PYTHON, ENV_CLOUDPICKLE = (
    "TRAINER_FUNCTION_SHA256",
    "TRAINER_FUNCTION_PYTHON",
    "TRAINER_FUNCTION_CLOUDPICKLE",
)


def _payload(env: Mapping[str, str]) -> Path:
    return Path(env.get("TRAINER_CODE_DIR") or os.getcwd()) / PAYLOAD


def check(env: Mapping[str, str]) -> str | None:
    """On each node, after the bundle is unpacked and before any process starts: the payload is the one the job
    was submitted with, and this Python and cloudpickle are the ones that pickled it (TrainerInputError if not).
    None for any other job; else one line for the launcher's log."""
    expected = env.get(ENV_SHA)
    if not expected:
        return None
    here_python = ".".join(str(v) for v in sys.version_info[:2])
    try:  # the module itself, not its metadata: what the ranks will load (and 3x faster than importlib.metadata)
        import cloudpickle

        here_cloudpickle = str(cloudpickle.__version__)
    except ImportError:
        here_cloudpickle = "none"
    wanted_python, wanted_cp = env.get(ENV_PYTHON, "?"), env.get(ENV_CLOUDPICKLE, "?")
    if (here_python, here_cloudpickle) != (wanted_python, wanted_cp):
        raise TrainerInputError(
            f"the function was pickled by Python {wanted_python} with cloudpickle {wanted_cp}, but this image has "
            f"Python {here_python} with cloudpickle {here_cloudpickle}: a pickled function loads only where both "
            f"match. Submit from an environment with Python {here_python} and cloudpickle {here_cloudpickle} (pip "
            f"install cloudpickle=={here_cloudpickle}), or run an image that has yours (the job's image:)"
        )
    path = _payload(env)
    try:
        found = hashlib.sha256(path.read_bytes()).hexdigest()
    except OSError as exc:
        raise TrainerInputError(
            f"the function's payload {path} cannot be read ({exc.strerror}): no code bundle?"
        ) from None
    if found != expected:
        raise TrainerInputError(
            f"function payload {path} has sha256 {found}, but the job was submitted with {expected}"
        )
    return f"function payload sha256 {found} verified (Python {here_python}, cloudpickle {here_cloudpickle})"


def _write(folder: Path, rank: int, entry: dict[str, Any], pickled: bytes | None) -> None:
    """The pickle first, then the json naming its digest; each by rename, so a reader never sees half a file."""
    folder.mkdir(parents=True, exist_ok=True)
    if pickled is not None:
        entry["sha256"] = hashlib.sha256(pickled).hexdigest()
        _atomic(folder / f"rank-{rank}.pkl", pickled)
    text = json.dumps({"rank": rank, **entry}, sort_keys=True).encode()
    _atomic(folder / f"rank-{rank}.json", text)
    if os.environ.get(LOG_ENV):
        _to_log({f"rank-{rank}.json": text, **({f"rank-{rank}.pkl": pickled} if pickled is not None else {})})


def _to_log(files: dict[str, bytes]) -> None:
    """Each file as `trainctl-function-result NAME I/N CHUNK` lines (runs/results.py's log_files joins them)."""
    if sum(len(data) for data in files.values()) > LOG_MAX:
        print(f"{LOG_MARK} too large for the log ({LOG_MAX >> 20} MiB): read it from the output folder", flush=True)
        return
    print_files(LOG_MARK, files)


def _atomic(path: Path, data: bytes) -> None:
    part = path.with_name(f".{path.name}.{os.getpid()}.part")
    part.write_bytes(data)
    os.replace(part, path)


def _dumps(obj: object) -> bytes | None:
    import cloudpickle

    try:
        return bytes(cloudpickle.dumps(obj, protocol=5))
    except Exception:
        return None


def main() -> int:
    """Run the shipped call on this rank; write its value or its exception; exit 1 when it raised."""
    env = os.environ
    rank = int(env.get("RANK", "0"))
    out = Path(env.get("TRAINER_OUTPUT_DIR") or "output") / RESULTS
    for stale in (out / f"rank-{rank}.json", out / f"rank-{rank}.pkl"):  # an earlier attempt's, not this one's
        stale.unlink(missing_ok=True)
    with paused_gc():  # unpickling imports the function's module, and with it torch (gc_pause.py)
        import cloudpickle  # noqa: F401  (by-value functions are rebuilt through it)

        fn, args, kwargs = pickle.loads(_payload(env).read_bytes())
    if env.get(ENV_ITEM):  # one trial of `map`: its item's keyword arguments over the call's
        items = pickle.loads((_payload(env).parent.parent / ITEMS).read_bytes())
        kwargs = {**kwargs, **items[int(env[ENV_ITEM])]}
    try:
        value = fn(*args, **kwargs)
    except BaseException as exc:
        text = traceback.format_exc()
        _write(out, rank, {"ok": False, "type": _qualname(exc), "message": str(exc), "traceback": text}, _dumps(exc))
        traceback.print_exc()
        return 1
    pickled = _dumps(value)
    if pickled is None:
        message = f"rank {rank} returned a {type(value).__name__}, which cannot be pickled to come back"
        _write(out, rank, {"ok": False, "type": "TypeError", "message": message, "traceback": ""}, None)
        print(f"error: {message}", file=sys.stderr)
        return 1
    _write(out, rank, {"ok": True}, pickled)
    return 0


def _qualname(exc: BaseException) -> str:
    kind = type(exc)
    return kind.__qualname__ if kind.__module__ == "builtins" else f"{kind.__module__}.{kind.__qualname__}"


if __name__ == "__main__":
    # Once the value or the error is written, leave without the interpreter's teardown: a function that
    # destroyed its process group without freeing its DDP model first can abort there (torch 2.13's gloo
    # threads: "terminate called without an active exception"), turning a returned value into SIGABRT.
    exit_without_teardown(main())

"""`trainctl validate`, `render` and `list` without typer: their arguments parsed here, their work done by
cli/validate_render.py and cli/listing.py, so a check, a render or a listing does not pay for typer's machinery
(about 0.15 s here, docs/benchmarks.md section 4).

Only a plain, well-formed command line is taken: one job file (none for `list`) and the commands' own options,
each given once or repeated as typer allows. Anything else (help, an unknown or missing option, a bad `--output`
or `--limit`, a second job file) returns None, and the typer app parses it as before and prints its own usage
error or help, so what a user sees does not change.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, NoReturn

from ..errors import TrainctlError
from .output import OutputFormat, report, show_error

_COMMON = {"--target": "target", "-t": "target", "--set": "overrides", "-s": "overrides", "--output": "output"}
OPTIONS: dict[str, dict[str, str]] = {
    "validate": {**_COMMON, "--option": "options", "-O": "options"},
    "render": {**_COMMON, "--out": "out", "-o": "out"},
    "list": {"--target": "target", "-t": "target", "--state": "state", "--limit": "limit", "-L": "limit",
             "--output": "output"},
}  # fmt: skip
FLAGS: dict[str, dict[str, str]] = {"list": {"--refresh": "refresh"}}
REPEATED = frozenset({"overrides", "options"})


def _defaults(command: str) -> dict[str, Any]:
    """What the typer command takes for an option not given (cli/jobs.py, cli/runs.py)."""
    if command == "list":
        return {"target": None, "state": None, "limit": "50", "refresh": False, "output": "text"}
    found: dict[str, Any] = {"target": "local", "overrides": [], "output": "text"}
    if command == "validate":
        found["options"] = []
    else:
        found["out"] = None
    return found


def parse(argv: list[str]) -> dict[str, Any] | None:
    """The command's arguments as the typer command takes them, or None where typer should answer."""
    if not argv or argv[0] not in OPTIONS:
        return None
    names, flags = OPTIONS[argv[0]], FLAGS.get(argv[0], {})
    found = _defaults(argv[0])
    files: list[str] = []
    rest = argv[1:]
    while rest:
        token = rest.pop(0)
        if token == "--":
            files += rest
            break
        if not token.startswith("-") or token == "-":
            files.append(token)
            continue
        if token in flags:
            found[flags[token]] = True
            continue
        # `--target=slurm`, `--target slurm`, `-tslurm`, `-t slurm`, as click reads them
        name, value = token.partition("=")[::2] if token.startswith("--") else (token[:2], token[2:])
        key = names.get(name)
        if key is None or (not value and "=" in token):
            return None
        if not value:
            if not rest or rest[0].startswith("-"):
                return None  # a missing value, or one typer would read differently: its own message
            value = rest.pop(0)
        if key in REPEATED:
            found[key].append(value)
        else:
            found[key] = value
    if found["output"] not in ("text", "json"):
        return None
    found["output"] = OutputFormat(found["output"])
    if argv[0] == "list":
        return _list_args(found, files)
    if len(files) != 1:
        return None
    found["job_file"] = Path(files[0])
    if found.get("out") is not None:
        found["out"] = Path(found["out"])
    return found


def _list_args(found: dict[str, Any], files: list[str]) -> dict[str, Any] | None:
    """`list` takes no file, and a `--limit` of at least 1 read as click reads an int (else click's message)."""
    try:
        found["limit"] = int(found["limit"])
    except ValueError:
        return None
    return found if not files and found["limit"] >= 1 else None


def run(argv: list[str]) -> int | None:
    """Run `validate`, `render` or `list` without typer and return the exit code; None: this line is typer's."""
    args = parse(argv)
    return None if args is None else execute(argv[0], args)


def execute(name: str, args: dict[str, Any]) -> int:
    """Run a parsed `validate`, `render` or `list` and return its exit code (its errors printed as typer would)."""
    command: Callable[..., None]
    if name == "list":
        from .listing import list_runs as command
    else:
        from . import validate_render

        command = validate_render.validate_job if name == "validate" else validate_render.render_job
    try:
        command(**args)
    except TrainctlError as exc:
        return report(exc, args["output"])
    except KeyboardInterrupt:
        show_error("interrupted")
        return 130
    return 0


# A check or a render reads one job file and exits. Two costs of a normal interpreter are pure waste for it (both
# measured on a render, docs/benchmarks.md section 4): the cyclic garbage collector, which runs ~80 times (to free
# ~1,000 objects) while pydantic builds the job's models (~10 ms), and the teardown at exit, which frees each of the
# ~240 modules one by one (~20 ms) for an operating system that frees them at once. `list` keeps both: it may
# refresh runs over the network and write the run store.
ONE_SHOT = frozenset({"validate", "render"})


def main() -> None:
    """`trainctl`'s start: validate, render and list here when their line is plain, everything else through typer."""
    argv = sys.argv[1:]
    args = parse(argv)
    if args is None:
        from .typer_app import app

        app()
        return
    if argv[0] not in ONE_SHOT:
        sys.exit(execute(argv[0], args))
    import gc

    gc.disable()  # the process ends with the command: what a collection would free, the exit frees
    leave(execute(argv[0], args))


def leave(code: int) -> NoReturn:
    """`sys.exit(code)` without the interpreter's teardown: exit handlers run and the streams are flushed first;
    a stream that cannot be flushed (a closed pipe) or a thread still running takes the normal exit, which says
    and waits as before."""
    import atexit
    import os
    import threading

    main_thread = threading.main_thread()
    if any(t is not main_thread and t.is_alive() and not t.daemon for t in threading.enumerate()):
        sys.exit(code)
    atexit._run_exitfuncs()
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    except (OSError, ValueError):
        sys.exit(code)
    os._exit(code)

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
from typing import Any

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
    if args is None:
        return None
    command: Callable[..., None]
    if argv[0] == "list":
        from .listing import list_runs as command
    else:
        from . import validate_render

        command = validate_render.validate_job if argv[0] == "validate" else validate_render.render_job
    try:
        command(**args)
    except TrainctlError as exc:
        return report(exc, args["output"])
    except KeyboardInterrupt:
        show_error("interrupted")
        return 130
    return 0


def main() -> None:
    """`trainctl`'s start: validate, render and list here when their line is plain, everything else through typer."""
    code = run(sys.argv[1:])
    if code is not None:
        sys.exit(code)
    from .typer_app import app

    app()

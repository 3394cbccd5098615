"""Reading job files safely: bounded size, YAML errors with line numbers, `--set key.path=value`."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from .errors import JobError

MAX_JOB_FILE_BYTES = 1_000_000  # a job file is a page of YAML, never megabytes
MAX_DEPTH = 32


def read_job_file(path: Path) -> str:
    """The file's text, refusing what cannot be a job file before parsing it."""
    if not path.is_file():
        raise JobError([f"{path}: no such file"], str(path))
    size = path.stat().st_size
    if size > MAX_JOB_FILE_BYTES:
        raise JobError([f"{path}: {size} bytes; a job file is at most {MAX_JOB_FILE_BYTES} bytes"], str(path))
    raw = path.read_bytes()
    if b"\x00" in raw:
        raise JobError([f"{path}: binary data, not a YAML job file"], str(path))
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise JobError([f"{path}: not UTF-8 text (byte {exc.start})"], str(path)) from None


def _depth(value: Any, level: int = 0) -> int:
    if level > MAX_DEPTH:
        return level
    if isinstance(value, dict):
        return max((_depth(v, level + 1) for v in value.values()), default=level)
    if isinstance(value, list):
        return max((_depth(v, level + 1) for v in value), default=level)
    return level


def load_yaml(text: str, source: str | None = None) -> Any:
    """Parse YAML; syntax errors name the line and column. Aliases are expanded once, bounded in depth."""
    try:
        data = yaml.safe_load(text)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark
        where = f"line {mark.line + 1}, column {mark.column + 1}" if mark else "unknown position"
        raise JobError([f"YAML syntax error at {where}: {exc.problem}"], source) from None
    except yaml.YAMLError as exc:
        raise JobError([f"YAML error: {exc}"], source) from None
    except RecursionError:
        raise JobError([f"YAML nested deeper than {MAX_DEPTH} levels"], source) from None
    if data is None:
        raise JobError(["the file is empty; a job needs at least `name` and `trainer` or `command`"], source)
    if _depth(data) > MAX_DEPTH:
        raise JobError([f"YAML nested deeper than {MAX_DEPTH} levels"], source)
    return data


def apply_overrides(data: dict[str, Any], assignments: list[str]) -> dict[str, Any]:
    """Set `a.b.c=value` paths in a copy of `data`; the value is read as a YAML scalar or flow value."""
    import copy

    out = copy.deepcopy(data)
    for item in assignments:
        key, sep, raw = item.partition("=")
        if not sep or not key.strip():
            raise JobError([f"--set {item!r}: expected key.path=value"], "--set")
        try:
            value = yaml.safe_load(raw) if raw.strip() else ""
        except yaml.YAMLError:
            value = raw
        node = out
        parts = key.strip().split(".")
        for part in parts[:-1]:
            child = node.get(part)
            if child is None:
                child = node[part] = {}
            if not isinstance(child, dict):
                raise JobError([f"--set {key}: {part} is not a section"], "--set")
            node = child
        node[parts[-1]] = value
    return out

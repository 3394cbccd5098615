"""Reading job files safely: bounded size, YAML errors with line numbers, `--set key.path=value`."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import yaml

from ..errors import JobError, UsageError

MAX_JOB_FILE_BYTES = 1_000_000  # a job file is a page of YAML, never megabytes
MAX_DEPTH = 32


def read_job_file(path: Path) -> str:
    """The file's text, refusing what cannot be a job file before parsing it."""
    if path.is_dir():
        found = sorted(p.name for p in path.glob("*.y*ml"))[:3]
        hint = f"; its YAML files: {', '.join(found)}" if found else ""
        raise UsageError([f"{path} is a folder; give the job file in it (e.g. {path / 'job.yaml'}){hint}"])
    if not path.is_file():
        raise UsageError([f"{path}: no such file"])
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


MAX_VALUES = 100_000  # after expanding aliases: a "billion laughs" file is refused, not expanded


class _BoundedLoader(yaml.SafeLoader):
    """SafeLoader that refuses, with a line number, what would make parsing slow or ambiguous:
    nesting deeper than MAX_DEPTH (PyYAML's scanner is quadratic in flow depth), integers too long
    for Python to convert, and duplicate keys (PyYAML silently keeps the last one)."""

    _level = 0

    def compose_node(self, parent: Any, index: Any) -> Any:
        self._level += 1
        try:
            if self._level > MAX_DEPTH:
                raise yaml.composer.ComposerError(
                    None, None, f"nested deeper than {MAX_DEPTH} levels", self.peek_event().start_mark
                )
            node = super().compose_node(parent, index)
        finally:
            self._level -= 1
        self._check_size(node)
        return node

    def _check_size(self, node: Any) -> None:
        """Count values as if aliases were expanded (linear: each node is counted once)."""
        sizes: dict[int, int] = self.__dict__.setdefault("_sizes", {})
        if id(node) in sizes:
            return
        if isinstance(node, yaml.SequenceNode):
            size = 1 + sum(sizes.get(id(child), 1) for child in node.value)
        elif isinstance(node, yaml.MappingNode):
            size = 1 + sum(sizes.get(id(k), 1) + sizes.get(id(v), 1) for k, v in node.value)
        else:
            size = 1
        sizes[id(node)] = size
        if size > MAX_VALUES:
            raise yaml.composer.ComposerError(
                None, None, f"aliases expand this value to more than {MAX_VALUES} values", node.start_mark
            )

    def fetch_flow_collection_start(self, TokenClass: Any) -> None:
        # checked while scanning: the scanner reads a whole flow collection before composing it
        if self.flow_level >= MAX_DEPTH:
            raise yaml.scanner.ScannerError(None, None, f"nested deeper than {MAX_DEPTH} levels", self.get_mark())
        super().fetch_flow_collection_start(TokenClass)

    def construct_yaml_int(self, node: Any) -> Any:
        try:
            return super().construct_yaml_int(node)
        except ValueError:
            raise yaml.constructor.ConstructorError(
                None, None, f"the number {node.value[:20]}... is too long", node.start_mark
            ) from None

    def construct_mapping(self, node: Any, deep: bool = False) -> Any:
        seen: set[Any] = set()
        for key_node, _ in node.value:
            if isinstance(key_node, yaml.ScalarNode) and key_node.tag != "tag:yaml.org,2002:merge":
                key = (key_node.tag, key_node.value)
                if key in seen:
                    raise yaml.constructor.ConstructorError(
                        None, None, f"duplicate key {key_node.value!r}", key_node.start_mark
                    )
                seen.add(key)
        return super().construct_mapping(node, deep=deep)


_BoundedLoader.add_constructor("tag:yaml.org,2002:int", _BoundedLoader.construct_yaml_int)
# YAML 1.2 floats: PyYAML (YAML 1.1) reads `1e-3` as the string "1e-3", which the strict spec would
# refuse for `lr: 1e-3`; 1.2's core schema, and every other YAML tool, reads a number.
_FLOAT_12 = re.compile(r"^[-+]?[0-9][0-9_]*(?:\.[0-9_]*)?[eE][-+]?[0-9]+$")
_BoundedLoader.add_implicit_resolver("tag:yaml.org,2002:float", _FLOAT_12, list("-+0123456789"))


class _Dumper(yaml.SafeDumper):
    """SafeDumper that quotes what `_BoundedLoader` would read back as a number (the string "1e3")."""


_Dumper.add_implicit_resolver("tag:yaml.org,2002:float", _FLOAT_12, list("-+0123456789"))


def dump_yaml(data: Any) -> str:
    """YAML that `load_yaml` reads back to exactly `data` (keys in the order given)."""
    text: str = yaml.dump(data, Dumper=_Dumper, sort_keys=False, allow_unicode=True)
    return text


def scalar(raw: str) -> Any:
    """A command-line value read as YAML, the same way as a job file (`2` int, `true` bool, `1e-3` float)."""
    if not raw.strip():
        return ""
    try:
        return yaml.load(raw, Loader=_BoundedLoader)  # a SafeLoader subclass
    except yaml.YAMLError:
        return raw


def _shape(value: Any) -> tuple[int, int]:
    """(depth, number of values) of parsed YAML as if aliases were expanded, in time linear in
    the distinct objects (shared ones, from aliases, are measured once)."""
    memo: dict[int, tuple[int, int]] = {}

    def walk(v: Any, stack: frozenset[int]) -> tuple[int, int]:
        if not isinstance(v, (dict, list)):
            return 0, 1
        key = id(v)
        if key in stack:  # a recursive alias: infinitely deep
            return MAX_DEPTH + 1, MAX_VALUES + 1
        if key not in memo:
            children = list(v.values()) if isinstance(v, dict) else v
            depth, count = 0, 1
            for child in children:
                d, c = walk(child, stack | {key})
                depth, count = max(depth, d + 1), min(count + c, MAX_VALUES + 1)
            memo[key] = (depth, count)
        return memo[key]

    return walk(value, frozenset())


def load_yaml(text: str, source: str | None = None) -> Any:
    """Parse YAML; syntax errors name the line and column. Aliases are bounded in depth and expanded size."""
    try:
        data = yaml.load(text, Loader=_BoundedLoader)  # a SafeLoader subclass
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
    depth, values = _shape(data)
    if depth > MAX_DEPTH:
        raise JobError([f"YAML nested deeper than {MAX_DEPTH} levels"], source)
    if values > MAX_VALUES:
        raise JobError([f"YAML aliases expand to more than {MAX_VALUES} values; a job file is small"], source)
    return data


def apply_overrides(data: dict[str, Any], assignments: list[str]) -> dict[str, Any]:
    """Set `a.b.c=value` paths in a copy of `data`; the value is read as a YAML scalar or flow value."""
    import copy

    out = copy.deepcopy(data)
    for item in assignments:
        key, sep, raw = item.partition("=")
        if not sep or not key.strip():
            raise UsageError([f"--set {item!r}: expected key.path=value"])
        value = scalar(raw)
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


def parse_options(assignments: list[str]) -> dict[str, Any]:
    """`-O key=value` submit options as a dict; each value is read as YAML (`true`, `30`, `direct`)."""
    options: dict[str, Any] = {}
    for item in assignments:
        key, sep, raw = item.partition("=")
        if not sep or not key.strip():
            raise UsageError([f"--option {item!r}: expected key=value"])
        options[key.strip()] = scalar(raw)
    return options

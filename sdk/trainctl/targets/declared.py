"""The `trainctl.targets` entry points, remembered between commands, so that a check or a render need not import
importlib.metadata.

Importing importlib.metadata costs ~15 ms here (zipfile, email, csv, importlib.resources), and reading the
entry points of ~200 installed packages ~4 ms more: a tenth of a render (docs/benchmarks.md section 4). So the
registry (targets/registry.py) keeps what it found in a small file, under the fingerprint of every
entry_points.txt that importlib.metadata's path finder can read (each path entry's `*-info` folders: the file's
path, size and modification time; a zip or other file on the path: its own). A package installed, removed,
upgraded or edited in place, or a different `sys.path`, changes the fingerprint, and the registry asks
importlib.metadata again, which stays the one authority.

The file is `$XDG_CACHE_HOME/trainctl/entry-points.json` (`~/.cache/trainctl` without it). A cache that cannot
be read or written is no error: the registry reads the metadata, as it always did.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import stat
from dataclasses import dataclass
from pathlib import Path

FILE_NAME = "entry-points.json"
KEEP = 8  # fingerprints remembered
# importlib/metadata/__init__.py, EntryPoint.pattern: `module`, `module:attr.attr`, either with `[extras]`
_VALUE = re.compile(r"(?P<module>[\w.]+)\s*(:\s*(?P<attr>[\w.]+)\s*)?((?P<extras>\[.*\])\s*)?$")


@dataclass(frozen=True)
class Declared:
    """One entry point of the group: its name and value, loaded as importlib.metadata's EntryPoint loads it."""

    name: str
    value: str

    @property
    def module(self) -> str:
        found = _VALUE.match(self.value)
        return found.group("module") if found else self.value

    def load(self) -> object:
        """The object the value names: its module imported, then each attribute (EntryPoint.load)."""
        import importlib

        found = _VALUE.match(self.value)
        if found is None:
            raise ValueError(f"{self.value!r} is not an entry point value (module or module:attribute)")
        obj: object = importlib.import_module(found.group("module"))
        for attr in filter(None, (found.group("attr") or "").split(".")):
            obj = getattr(obj, attr)
        return obj


def cache_file() -> Path:
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "trainctl" / FILE_NAME


def fingerprint(path: list[str]) -> str:
    """A digest of every entry_points.txt a path finder would read on `path` (where, size, mtime), in path order.

    A folder without one adds nothing, so `python -m trainctl` run from another folder (the path's first entry)
    finds the same key."""
    rows: list[str] = []
    for entry in path:
        where = entry or "."
        try:
            st = os.stat(where)
        except OSError:
            continue  # nothing there, nothing declared
        if not stat.S_ISDIR(st.st_mode):  # a zip on the path: any change to it counts
            rows.append(f"{entry}\0{st.st_size}\0{st.st_mtime_ns}")
            continue
        try:
            with os.scandir(where) as found:
                infos = sorted(e.name for e in found if e.name.lower().endswith("-info"))
        except OSError:
            continue
        for name in infos:  # foo-1.0.dist-info, foo.egg-info, an egg's EGG-INFO
            try:
                st = os.stat(os.path.join(where, name, "entry_points.txt"))
            except OSError:
                continue
            rows.append(f"{entry}\0{name}\0{st.st_size}\0{st.st_mtime_ns}")
    return hashlib.sha256("\n".join(rows).encode()).hexdigest()


def _read(group: str) -> dict[str, list[list[str]]]:
    """{key: [[name, value], ...]} kept for `group`, newest last; {} for no file, a bad one or another group's."""
    try:
        data = json.loads(cache_file().read_text())
        return dict(data["keys"]) if data["group"] == group else {}
    except (OSError, ValueError, KeyError, TypeError):
        return {}


def recall(key: str, group: str) -> list[Declared] | None:
    """The group's entry points remembered under `key`, or None (nothing remembered under it, a bad file)."""
    try:
        return [Declared(str(name), str(value)) for name, value in _read(group)[key]]
    except (KeyError, TypeError, ValueError):
        return None


def remember(key: str, group: str, points: list[Declared]) -> None:
    """Keep `points` under `key`, beside the last few other keys (the console script and `python -m trainctl` see
    different paths, as do virtual environments sharing a home). The file is written whole, then renamed into
    place: a concurrent reader sees one or the other; a folder that cannot be written is left as it is."""
    keys = _read(group)
    keys.pop(key, None)
    keys[key] = [[p.name, p.value] for p in points]
    text = json.dumps({"group": group, "keys": dict(list(keys.items())[-KEEP:])})
    target = cache_file()
    partial = target.with_name(f".{FILE_NAME}.{os.getpid()}")
    try:
        target.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        partial.write_text(text)
        os.replace(partial, target)
    except OSError:
        with contextlib.suppress(OSError):
            partial.unlink(missing_ok=True)

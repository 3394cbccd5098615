"""The targets installed here: each one is a plug-in (targets/plugin.py), found through the `trainctl.targets` entry points.

The anchor is TorchX's `torchx.schedulers` group (torchx/schedulers/__init__.py `get_scheduler_factories`,
over torchx/util/entrypoints.py `load_group`): a scheduler package declares an entry point, and TorchX finds
it by name and loads its module only when it is used. Here an entry point's value is the package's
`TargetPlugin`: its job section, the handle its runs record, and where its `Target` is. The spec takes the
section (spec/job_spec.py) and the run store the handle type (runs/store.py) without loading render or engine code;
`targets/lookup.py` loads the `Target` on first use. trainctl's own four targets are declared the same
way, in pyproject.toml, so a fifth is one package and one entry point, with no edit inside trainctl
(docs/architecture.md). Finding the names reads installed metadata only (or, while no package changed, what the
last command found there: targets/declared.py); nothing is imported until a plug-in is asked for.
"""

from __future__ import annotations

import importlib
from functools import cache
from typing import TYPE_CHECKING

from ..errors import JobError, TrainctlError, UsageError, did_you_mean

if TYPE_CHECKING:
    from collections.abc import Iterable
    from importlib.metadata import EntryPoint

    from ..runs.state import RunHandle
    from ..spec.target_section import TargetSection
    from .declared import Declared
    from .plugin import TargetPlugin

GROUP = "trainctl.targets"


class PluginError(TrainctlError):
    """An installed target plug-in is broken (two packages claim one name, an entry point does not load)."""

    exit_code = 1


@cache
def _entry_points() -> dict[str, Declared]:
    """{name: entry point} of the installed targets: remembered from the last command while the installed packages'
    entry points are unchanged (targets/declared.py), else read from their metadata."""
    import sys

    from . import declared

    key = declared.fingerprint(list(sys.path))  # before the metadata is read: a change meanwhile is a new key
    remembered = declared.recall(key, GROUP)
    if remembered:
        return dict(sorted((point.name, point) for point in remembered))
    found = {name: declared.Declared(name, point.value) for name, point in _scan().items()}
    declared.remember(key, GROUP, list(found.values()))
    return found


def _scan() -> dict[str, EntryPoint]:
    """{name: entry point} of the installed targets, as importlib.metadata lists them; a clash or none is an error."""
    found, clash = _first_by_name(_mentioning_group())
    if clash is not None:  # decided over importlib.metadata's own list, which counts a package found twice once
        from importlib.metadata import entry_points

        found, clash = _first_by_name(entry_points(group=GROUP))
    if clash is not None:
        first, point = clash
        raise PluginError(
            f"target {point.name!r} is declared by two installed packages ({_owner(first)}: {first.value}; "
            f"{_owner(point)}: {point.value}); uninstall one"
        )
    if not found:
        raise PluginError(
            f"no target is installed: no package declares a {GROUP!r} entry point, not even trainctl's own; "
            "reinstall trainctl (pip install -e . in a checkout): its metadata lists its four targets"
        )
    return dict(sorted(found.items()))


def _mentioning_group() -> list[EntryPoint]:
    """The group's entry points, in path order, parsed only from the entry_points.txt files that name the group.

    `importlib.metadata.entry_points(group=...)` parses every installed package's file into entry points before it
    selects (~5 ms here, on each command whose packages changed since the last); this reads the same files and
    parses one. It does not count a package found twice on the path once, as that does: `_scan` asks
    `entry_points` itself when the two copies disagree."""
    from importlib.metadata import distributions

    points: list[EntryPoint] = []
    for dist in distributions():
        text = dist.read_text("entry_points.txt")
        if text and GROUP in text:
            points += dist.entry_points.select(group=GROUP)
    return points


def _first_by_name(points: Iterable[EntryPoint]) -> tuple[dict[str, EntryPoint], tuple[EntryPoint, EntryPoint] | None]:
    """{name: its first entry point}, and the first two that give one name different values (None: no clash)."""
    found: dict[str, EntryPoint] = {}
    for point in points:
        if point.name in found and found[point.name].value != point.value:
            return found, (found[point.name], point)
        found.setdefault(point.name, point)
    return found, None


def _owner(point: EntryPoint) -> str:
    """The distribution that declares `point`, for the message only: its name is read from its METADATA (the email
    parser, ~5 ms here), which a command that finds no clash never pays."""
    return point.dist.name if point.dist is not None else "?"


def names() -> tuple[str, ...]:
    """The installed targets' names, sorted (no second list says which comes first)."""
    return tuple(_entry_points())


def names_text() -> str:
    """`local, slurm, kubernetes or sagemaker`, for help and error messages."""
    found = names()
    return ", ".join(found[:-1]) + f" or {found[-1]}" if len(found) > 1 else found[0]


ALIASES = {"k8s": "kubernetes"}
"""Short names a target also answers to, as kubectl's users write it (the CLI's own group is `trainctl k8s`)."""


def canonical(name: str) -> str:
    """The installed target's own name for `name` (`k8s` -> `kubernetes`); an unknown name is returned as is."""
    return ALIASES.get(name, name) if name not in _entry_points() else name


def unknown(name: str, what: str = "target") -> JobError:
    """The error for a target name no plug-in declares (exit 2), with the closest installed one."""
    return UsageError(
        [f"{what}: got {name!r}{did_you_mean(name, list(names()))}; expected one of {', '.join(names())}"]
    )


@cache
def plugin(name: str) -> TargetPlugin:
    """The plug-in called `name` (its declaring module is imported now), or a JobError naming the installed ones."""
    point = _entry_points().get(name)
    if point is None:
        raise unknown(name)
    try:
        found = point.load()
    except Exception as exc:
        raise PluginError(f"target {name!r}: its entry point {point.value} does not load: {exc}") from exc
    from .plugin import TargetPlugin  # here, not at the top: `trainctl --help` needs names only (no pydantic)

    if not isinstance(found, TargetPlugin):
        raise PluginError(f"target {name!r}: {point.value} is a {type(found).__name__}, not a TargetPlugin")
    return found


def sections() -> dict[str, type[TargetSection]]:
    """{name: section class} of every installed target (each plug-in is loaded: section and handle only)."""
    return {name: plugin(name).section for name in names()}


@cache
def handle_type(name: str) -> type[RunHandle]:
    """The handle class a target's runs record (a plug-in's `module:Class` is imported now); the base, which keeps
    any keys, for a target not installed here (its recorded runs still list)."""
    from ..runs.state import RunHandle

    if name not in _entry_points():
        return RunHandle
    declared = plugin(name).handle
    if not isinstance(declared, str):
        found: object = declared
    else:
        module, _, attribute = declared.partition(":")
        try:
            found = getattr(importlib.import_module(module), attribute)
        except (ImportError, AttributeError, ValueError) as exc:
            raise PluginError(f"target {name!r}: its handle {declared} does not load: {exc}") from exc
    if not (isinstance(found, type) and issubclass(found, RunHandle)):
        raise PluginError(f"target {name!r}: its handle {declared!r} is not a RunHandle class")
    return found


def split_run_id(run_id: str) -> tuple[str, str]:
    """`slurm:123` -> ("slurm", "123"), with a clear error for anything else."""
    target, sep, native = run_id.partition(":")
    if not sep or target not in names() or not native:
        raise TrainctlError(
            f"run id {run_id!r}: expected <target>:<id> with target one of {', '.join(names())} "
            "(e.g. local:20261121-120000-digits-1a2b, slurm:42, kubernetes:default/digits, sagemaker:digits-2026...)"
        )
    return target, native

"""Your function as the job's program: pickled once at submit (cloudpickle), shipped inside the code bundle.

`ship(fn, args, kwargs)` makes the payload: a function from `__main__` or a notebook goes by value, with the
helpers, constants and imports it uses; a function from an importable module by reference (it must travel with
`code:` or be installed in the image). Bad input is refused here, before anything is queued: what cannot be
pickled is named with where it is referenced, and a payload over `MAX_BYTES` points at `data:`.
cloudpickle is imported only here, when a function is shipped (the CLI never imports it).
"""

from __future__ import annotations

import hashlib
import sys
import types
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from .errors import JobError

PAYLOAD = ".trainctl/function.pkl"
"""Where the payload sits in the code bundle (trainer/function.py reads it from the unpacked folder)."""
ITEMS, ENV_ITEM = ".trainctl/items.pkl", "TRAINER_FUNCTION_ITEM"
"""`map`'s keyword arguments, one dict per trial, beside the payload; a trial's index picks its own."""
RESULTS = "function"
"""The folder in the run's output location where every rank writes its result (rank-<N>.json, .pkl)."""
LOG_MARK = "trainctl-function-result"
"""Kubernetes: each rank also prints its result files to its log under this mark (trainer/function.py)."""
MAX_BYTES = 20 * 1000 * 1000
ENV_SHA, ENV_PYTHON, ENV_CLOUDPICKLE = (
    "TRAINER_FUNCTION_SHA256",
    "TRAINER_FUNCTION_PYTHON",
    "TRAINER_FUNCTION_CLOUDPICKLE",
)
COMMAND = ["python", "-m", "trainer.function"]
_PLUMBING = {"builtins", "copyreg", "_codecs", "cloudpickle", "__main__", "types", "functools", "collections"}


@dataclass(frozen=True)
class Function:
    """The shipped call: the payload's bytes and sha256, the function's name, the modules it is bound to by
    reference, and the submitting side's Python (major.minor) and cloudpickle versions the image must match."""

    payload: bytes
    sha256: str
    name: str
    modules: tuple[str, ...]
    python: str
    cloudpickle: str

    def env(self) -> dict[str, str]:
        """What the launcher checks on every node before any process starts (trainer/function.py)."""
        return {ENV_SHA: self.sha256, ENV_PYTHON: self.python, ENV_CLOUDPICKLE: self.cloudpickle}

    def describe(self) -> str:
        """One render line: what is shipped."""
        bound = ", ".join(self.modules) or "none"
        return (
            f"function: {self.name} ({len(self.payload):,} bytes, pickled by cloudpickle {self.cloudpickle} on "
            f"Python {self.python}); sha256 {self.sha256}; modules bound by reference: {bound}"
        )


def ship(fn: Callable[..., Any], args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> Function:
    """Pickle `fn(*args, **kwargs)`; a JobError naming what cannot be pickled (or a tensor off the CPU: a CUDA
    tensor loads only where CUDA is), or a payload too large."""
    import cloudpickle

    if not callable(fn):
        raise JobError([f"with_function: got {type(fn).__name__} {fn!r}; expected a function"])
    name = f"{getattr(fn, '__module__', '?')}.{getattr(fn, '__qualname__', repr(fn))}"
    for where, obj in _candidates(fn, args, kwargs):
        device = getattr(obj, "device", None) if type(obj).__module__.startswith("torch") else None
        if getattr(device, "type", "cpu") != "cpu":
            raise JobError([f"with_function({name}): {where} is a tensor on {device}, which loads only where that "
                            "device is (and pickles its memory): move it to the CPU (.cpu()) or create it inside "
                            "the function"])  # fmt: skip
    try:
        payload = cloudpickle.dumps((fn, tuple(args), dict(kwargs)), protocol=5)
    except Exception as exc:  # pickle raises TypeError, PicklingError, AttributeError... alike
        culprit = _culprit(fn, args, kwargs)
        found = f"{culprit[0]} ({type(culprit[1]).__name__})" if culprit else "an object it uses"
        raise JobError([f"with_function({name}): {found} cannot be pickled: {exc}. " + _HINT]) from None
    if len(payload) > MAX_BYTES:
        raise JobError(
            [
                f"with_function({name}): the pickled function and its arguments take {len(payload) / 1e6:.1f} MB, "
                f"over {MAX_BYTES / 1e6:g} MB: pass data through the job's `data:` inputs (read them from "
                "TRAINER_DATA_<NAME> in the function) instead of in its arguments or closure"
            ]
        )
    return Function(
        payload, hashlib.sha256(payload).hexdigest(), name, _modules(fn, args, kwargs),
        ".".join(map(str, sys.version_info[:2])), cloudpickle.__version__,
    )  # fmt: skip


def ship_items(name: str, items: list[Mapping[str, Any]]) -> bytes:
    """`map`'s items pickled; a JobError naming the item and key that cannot be, or a payload too large."""
    import cloudpickle

    for index, item in enumerate(items):
        if not isinstance(item, Mapping) or not all(isinstance(k, str) for k in item):
            raise JobError(
                [f"map({name}): item {index} is {type(item).__name__}; expected a dict of keyword arguments"]
            )
        for key, value in item.items():
            try:
                cloudpickle.dumps(value)
            except Exception as exc:
                raise JobError([f"map({name}): items[{index}][{key!r}] ({type(value).__name__}) cannot be pickled: "
                                f"{exc}. " + _HINT]) from None  # fmt: skip
    data = bytes(cloudpickle.dumps([dict(i) for i in items], protocol=5))
    if len(data) > MAX_BYTES:
        raise JobError([f"map({name}): the items take {len(data) / 1e6:.1f} MB, over {MAX_BYTES / 1e6:g} MB: pass "
                        "data through the job's `data:` inputs and name what each item reads"])  # fmt: skip
    return data


_HINT = (
    "Open files, locks, sockets and processes cannot travel: create them inside the function, "
    "and pass paths (or `data:` inputs) instead"
)


def _modules(fn: Any, args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> tuple[str, ...]:
    """Top-level modules the call is bound to by reference (what goes by value is not): the image, or `code:`,
    must be able to import them. Read from the objects, as cloudpickle decides: `__main__` goes by value."""
    import cloudpickle

    by_value = getattr(cloudpickle.cloudpickle, "_is_registered_pickle_by_value", lambda module: False)
    found: set[str] = set()
    objects = [fn, *args, *kwargs.values()]
    objects += [obj for where, obj in _references(fn, set(), modules=True)]
    for obj in objects:
        name = obj.__name__ if isinstance(obj, types.ModuleType) else getattr(obj, "__module__", None)
        if not isinstance(name, str):
            name = type(obj).__module__
        module = sys.modules.get(name)
        if module is None or not by_value(module):  # cloudpickle.register_pickle_by_value: it goes by value
            found.add(name.split(".")[0])
    return tuple(sorted(m for m in found if m not in _PLUMBING and not m.startswith("_")))


def _culprit(fn: Callable[..., Any], args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> tuple[str, Any] | None:
    """The first object that cannot be pickled, named by where it is referenced: an argument, or a global or
    closure variable of the function (or of a helper it calls, followed by value as cloudpickle does)."""
    import cloudpickle

    for where, obj in _candidates(fn, args, kwargs):
        try:
            cloudpickle.dumps(obj)
        except Exception:
            return where, obj
    return None


def _candidates(fn: Any, args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> list[tuple[str, Any]]:
    """(where, object) for everything the call carries: its arguments, then what the function references."""
    found: list[tuple[str, Any]] = [(f"args[{i}]", a) for i, a in enumerate(args)]
    found += [(f"kwargs[{k!r}]", v) for k, v in kwargs.items()]
    return found + list(_references(fn, set()))


def _references(fn: Any, seen: set[int], modules: bool = False) -> Iterator[tuple[str, Any]]:
    """(where, object) for each global and closure variable `fn` uses (modules too, with `modules`); helpers that
    go by value, recursively."""
    if not isinstance(fn, types.FunctionType) or id(fn) in seen:
        return
    seen.add(id(fn))
    label = f"{fn.__qualname__}()"
    cells = dict(zip(fn.__code__.co_freevars, fn.__closure__ or (), strict=False))
    for var, cell in cells.items():
        try:
            yield f"`{var}` in the closure of {label}", cell.cell_contents
        except ValueError:  # an empty cell
            continue
    for var in sorted(_global_names(fn.__code__)):
        if var in fn.__globals__:
            value = fn.__globals__[var]
            if isinstance(value, types.FunctionType) and value.__module__ == fn.__module__:
                yield from ((f"{where}, called by {label}", o) for where, o in _references(value, seen, modules))
            elif modules or not isinstance(value, types.ModuleType):
                yield f"global `{var}` used by {label}", value


def _global_names(code: types.CodeType) -> set[str]:
    names = set(code.co_names)
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            names |= _global_names(const)
    return names

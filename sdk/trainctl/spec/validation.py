"""Turning pydantic's errors into lines a person can act on: field path, value, what is accepted."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ValidationError

from ..errors import FieldProblem, did_you_mean, short_repr


def _model_at(model: type[BaseModel], loc: tuple[int | str, ...]) -> type[BaseModel] | None:
    """The model class that owns the last element of `loc`, for suggesting field names."""
    current: Any = model
    for part in loc[:-1]:
        if isinstance(part, int) or not (isinstance(current, type) and issubclass(current, BaseModel)):
            continue
        field = current.model_fields.get(part)
        if field is None:
            return None
        current = _unwrap(field.annotation)
    return current if isinstance(current, type) and issubclass(current, BaseModel) else None


def _unwrap(annotation: Any) -> Any:
    """The BaseModel inside Optional[X] / list[X], if any."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    for arg in getattr(annotation, "__args__", ()):
        inner = _unwrap(arg)
        if inner is not None:
            return inner
    return None


def _path(loc: tuple[int | str, ...]) -> str:
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        elif "[" in str(part) or "," in str(part):
            continue  # pydantic's union-branch labels such as "function-after[...]"
        else:
            out += f".{part}" if out else str(part)
    return out or "(job)"


# Strict scalars (section.py): what a field of each type accepts, for "got '2'; expected an integer".
_EXPECTED = {
    "int_type": "an integer",
    "int_from_float": "an integer",
    "float_type": "a number",
    "string_type": "a string",
    "bool_type": "a boolean (true or false)",
    "list_type": "a list",
    "dict_type": "a mapping",
}
_BRANCHES = frozenset({"int", "float", "str", "bool", "none"})  # pydantic's labels of union members


def format_validation_error(exc: ValidationError, model: type[BaseModel]) -> list[str]:
    """One line per problem, e.g. `resources.nodes: got -1; must be greater than or equal to 1`."""
    lines: list[str] = []
    wrong_type: dict[str, tuple[Any, list[str]]] = {}  # path -> (value, accepted types), one line per field
    for err in exc.errors(include_url=False):
        loc = tuple(err["loc"])
        path = _path(loc)
        kind = err["type"]
        if kind in _EXPECTED:
            if loc and loc[-1] in _BRANCHES:
                path = _path(loc[:-1])
            if path not in wrong_type:
                wrong_type[path] = (err.get("input"), [])
                lines.append(path)  # placeholder, filled in below
            wrong_type[path][1].append(_EXPECTED[kind])
        elif kind == "extra_forbidden":
            owner = _model_at(model, loc)
            choices = [f.alias or name for name, f in owner.model_fields.items()] if owner else []  # as written
            hint = did_you_mean(str(loc[-1]), choices)
            accepted = f"; known fields here: {', '.join(choices)}" if choices and not hint else ""
            lines.append(f"{path}: unknown field{hint}{accepted}")
        elif kind == "missing":
            lines.append(f"{path}: required field is missing")
        else:
            problem = (err.get("ctx") or {}).get("error")
            if isinstance(problem, FieldProblem):
                path = f"{path}.{problem.path}" if loc else problem.path
            msg = str(err["msg"]).removeprefix("Value error, ")
            value = err.get("input")
            got = "" if isinstance(value, dict) else f"got {short_repr(value)}; "
            lines.append(f"{path}: {got}{msg}")
    for path, (value, types) in wrong_type.items():
        text = f"{path}: got {short_repr(value)} ({type(value).__name__}); expected {' or '.join(dict.fromkeys(types))}"
        lines[lines.index(path)] = text
    return list(dict.fromkeys(lines))

"""A sweep's search space as data: the job file's `sweep:` section and what it expands to. Pure: no I/O.

A sweep is a job plus a search space. `grid` values are tried in every combination (in the order
written, the first key slowest, as `itertools.product` gives them); `random` draws `trials` points from
each expression with a seeded generator, so the same seed gives the same trials. Both together: each
grid point gets `trials` random draws. Each trial is a set of `--set` overrides (`trial_sets`), which
the caller validates against the job exactly as `--set` is validated.
"""

from __future__ import annotations

import itertools
import json
import math
import random as random_module
import re
from typing import Any, Literal

from pydantic import Field, field_validator, model_validator
from typing_extensions import Self

from ..errors import FieldProblem, JobError
from .loading import scalar
from .section import Section

MAX_TRIALS = 10_000
_KEY = re.compile(r"^[a-z_][a-z0-9_]*(\.[A-Za-z0-9_-]+)+$")
_EXPRESSION = re.compile(r"^\s*([a-z_]+)\s*\((.*)\)\s*$")
DISTRIBUTIONS = {
    "uniform": "uniform(low, high): a float, low <= x <= high",
    "loguniform": "loguniform(low, high): a float whose log is uniform; 0 < low < high",
    "randint": "randint(low, high): an integer, low <= n <= high",
    "choice": "choice(a, b, ...): one of the values",
}
Scalar = bool | int | float | str


class EarlyStopping(Section):
    """The median rule (docs/sweeps.md): from `after_step` on, a running trial whose best metric so far is
    worse than the median of the other trials' best at the same step is stopped (it checkpoints and exits)."""

    rule: Literal["median"] = "median"
    after_step: int = Field(..., ge=0, description="Compare trials only from this training step on.")
    min_trials: int = Field(2, ge=1, le=1000, description="Other trials that must have reached the step.")


class SweepSpec(Section):
    """The `sweep:` section: a search space over the job's fields, how many at once, what to optimise."""

    strategy: Literal["grid", "random", "bayesian"] | None = Field(
        None, description="Default: grid when only `grid` is given, else random. bayesian: SageMaker only."
    )
    grid: dict[str, list[Scalar]] = Field(default_factory=dict, description="field.path: [values] (every combination).")
    random: dict[str, str] = Field(
        default_factory=dict, description="field.path: an expression: " + "; ".join(DISTRIBUTIONS.values())
    )
    trials: int | None = Field(
        None, ge=1, le=MAX_TRIALS, description="Random draws (per grid point); default 1. bayesian: the training jobs."
    )
    parallel: int = Field(1, ge=1, le=1000, description="Trials running at once.")
    metric: str = Field("val_accuracy", description="The trainer's metric to rank trials by (metrics.jsonl).")
    mode: Literal["max", "min"] = "max"
    seed: int | None = Field(None, ge=0, description="Random search's seed; chosen and recorded when not given.")
    early_stopping: EarlyStopping | None = None

    @field_validator("grid", "random")
    @classmethod
    def _keys(cls, value: dict[str, Any]) -> dict[str, Any]:
        for key in value:
            if not _KEY.match(key):
                raise ValueError(f"{key!r} is not a field path such as trainer.lr")
            if key.split(".")[0] in ("sweep", "name", "code"):
                raise ValueError(f"{key!r}: a sweep cannot vary {key.split('.')[0]}")
        return value

    @field_validator("grid")
    @classmethod
    def _grid_values(cls, value: dict[str, list[Scalar]]) -> dict[str, list[Scalar]]:
        for key, values in value.items():
            if not values:
                raise ValueError(f"{key}: give at least one value")
        return value

    @field_validator("random")
    @classmethod
    def _expressions(cls, value: dict[str, str]) -> dict[str, str]:
        for key, text in value.items():
            try:
                parse_distribution(text)
            except ValueError as exc:
                raise ValueError(f"{key}: {exc}") from None
        return value

    @model_validator(mode="after")
    def _space(self) -> Self:
        if not self.grid and not self.random:
            raise FieldProblem("grid", "a sweep needs a search space: `grid` or `random` (or both)")
        both = sorted(set(self.grid) & set(self.random))
        if both:
            raise FieldProblem("random", f"{', '.join(both)} is in both grid and random; give it once")
        if self.strategy == "bayesian":
            if self.trials is None:
                raise FieldProblem("trials", "strategy bayesian needs trials: how many training jobs SageMaker runs")
        elif self.trials is not None and not self.random:
            raise FieldProblem("trials", "trials counts random draws: give `random` too, or leave trials out")
        if self.strategy == "grid" and self.random:
            raise FieldProblem("strategy", "strategy grid takes no `random` expressions")
        if self.size > MAX_TRIALS:
            raise FieldProblem("grid", f"the space has {self.size} trials; at most {MAX_TRIALS}")
        return self

    @property
    def chosen_strategy(self) -> str:
        return self.strategy or ("random" if self.random else "grid")

    @property
    def size(self) -> int:
        """The number of trials (bayesian: the training jobs SageMaker's search runs)."""
        if self.strategy == "bayesian":
            return self.trials or 1
        return math.prod(len(v) for v in self.grid.values()) * (self.trials or 1)

    def seeded(self, seed: int) -> Self:
        """This sweep with `seed` recorded, unless it names one already."""
        return self if self.seed is not None else self.model_copy(update={"seed": seed})


def parse_distribution(text: str) -> tuple[str, list[Scalar]]:
    """(name, arguments) of `loguniform(1e-4, 1e-2)`; ValueError naming the bad part."""
    found = _EXPRESSION.match(text)
    if not found:
        raise ValueError(f"{text!r} is not an expression such as loguniform(1e-4, 1e-2)")
    name, raw = found.groups()
    if name not in DISTRIBUTIONS:
        raise ValueError(f"{text!r}: unknown distribution {name!r}; expected {', '.join(DISTRIBUTIONS)}")
    args = [scalar(part.strip()) for part in raw.split(",")] if raw.strip() else []
    usage = DISTRIBUTIONS[name]
    if name == "choice":
        if not args or any(isinstance(a, (list, dict)) or a is None for a in args):
            raise ValueError(f"{text!r}: expected {usage}")
        return name, args
    numbers = [a for a in args if isinstance(a, (int, float)) and not isinstance(a, bool)]
    if len(args) != 2 or len(numbers) != 2:
        raise ValueError(f"{text!r}: expected two numbers, {usage}")
    low, high = numbers
    if name == "randint" and not all(isinstance(a, int) for a in numbers):
        raise ValueError(f"{text!r}: expected two integers, {usage}")
    if not low < high and not (name == "randint" and low == high):
        raise ValueError(f"{text!r}: low must be below high")
    if name == "loguniform" and low <= 0:
        raise ValueError(f"{text!r}: low must be above 0, {usage}")
    bounds: list[Scalar] = [low, high]
    return name, bounds


def _draw(rng: random_module.Random, text: str) -> Scalar:
    name, args = parse_distribution(text)
    if name == "choice":
        return args[rng.randrange(len(args))]
    low, high = float(args[0]), float(args[1])
    if name == "randint":
        return rng.randint(int(low), int(high))
    value = math.exp(rng.uniform(math.log(low), math.log(high))) if name == "loguniform" else rng.uniform(low, high)
    return float(f"{value:.4g}")  # 4 significant digits: readable, and what the trial records is what ran


def trial_params(spec: SweepSpec) -> list[dict[str, Scalar]]:
    """Every trial's values, in order; random draws need `spec.seed` (seeded() first)."""
    if spec.random and spec.seed is None:
        raise ValueError("a random sweep needs its seed recorded first (SweepSpec.seeded)")
    rng = random_module.Random(spec.seed)
    points = [dict(zip(spec.grid, values, strict=True)) for values in itertools.product(*spec.grid.values())]
    out: list[dict[str, Scalar]] = []
    for point in points:
        for _ in range(spec.trials or 1):
            out.append({**point, **{key: _draw(rng, text) for key, text in spec.random.items()}})
    return out


def as_sets(params: dict[str, Scalar]) -> list[str]:
    """A trial's values as `--set key=value` strings (JSON values: YAML reads them back unchanged)."""
    return [f"{key}={json.dumps(value)}" for key, value in params.items()]


def params_text(params: dict[str, Scalar]) -> str:
    return " ".join(f"{key}={value}" for key, value in params.items())


def from_flags(base: SweepSpec | None, grid: list[str], random: list[str], **given: Any) -> SweepSpec:
    """The job file's `sweep:` section with the command line's flags on top (`--grid k=v1,v2`, `--random
    'k=expr'`, `--trials`, `--parallel`...); a malformed flag is a JobError naming it."""
    grids: dict[str, list[Any]] = {}
    randoms: dict[str, str] = {}
    problems = []
    for flag, items in (("--grid", grid), ("--random", random)):
        for item in items:
            key, sep, raw = item.partition("=")
            if not sep or not key.strip() or not raw.strip():
                example = "value1,value2" if flag == "--grid" else "loguniform(1e-4,1e-2)"
                problems.append(f"{flag} {item!r}: expected field.path={example}")
            elif flag == "--grid":
                grids[key.strip()] = [scalar(v.strip()) for v in raw.split(",")]
            else:
                randoms[key.strip()] = raw.strip()
    if problems:
        raise JobError(problems, "command line")
    return merged(base, grid=grids, random=randoms, **given)


def merged(base: SweepSpec | None, **given: Any) -> SweepSpec:
    """`base` (the job's `sweep:`) with the given fields on top; `grid` and `random` add or replace keys."""
    data: dict[str, Any] = base.model_dump(exclude_none=True) if base else {}
    for key in ("grid", "random"):
        data[key] = {**data.get(key, {}), **(given.pop(key, None) or {})}
    data.update({k: v for k, v in given.items() if v is not None})
    return parse(data, "sweep")


def parse(data: Any, source: str | None = None) -> SweepSpec:
    """Validate a `sweep:` mapping; errors name `sweep.<field>`."""
    from pydantic import ValidationError

    from .validation import format_validation_error

    if not isinstance(data, dict):
        raise JobError([f"sweep: expected a mapping, got {type(data).__name__}"], source)
    try:
        return SweepSpec.model_validate(data)
    except ValidationError as exc:
        raise JobError([f"sweep.{line}" for line in format_validation_error(exc, SweepSpec)], source) from None

"""JSONL records -> tensors. Map-style (small data, sharded by `order.py`) lives here; the
rank-sharded streaming reader for large data is in `streaming.py`.

Record format for every model: one JSON object per line, `{"x": numbers, "y": label}`;
`x` is a flat (or nested) list of numbers, `y` an int class for classifiers and a number or list
of numbers for regressors. Blank lines are skipped. Errors name `file:line`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import orjson
import torch
from torch.utils.data import Dataset

from ..errors import TrainerInputError
from .sources import resolve_files

__all__ = ["resolve_files"]


def parse_line(raw: bytes, where: str) -> dict[str, Any]:
    try:
        record = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise TrainerInputError(f"{where}: malformed JSON line: {exc}") from None
    if not isinstance(record, dict):
        raise TrainerInputError(f'{where}: expected a JSON object like {{"x": [...], "y": ...}}')
    return record


def _shape(value: Any, where: str) -> tuple[int, ...]:
    if isinstance(value, list):
        if not value:
            raise TrainerInputError(f"{where}: 'x' is an empty list")
        return (len(value), *_shape(value[0], where))
    if isinstance(value, int | float) and not isinstance(value, bool):
        return ()
    raise TrainerInputError(f"{where}: 'x' must hold numbers, found {type(value).__name__} {value!r}")


def check_record(record: dict[str, Any], task: str, where: str) -> tuple[Any, Any]:
    """(x, y) of one record, checked enough that tensor building cannot fail silently."""
    if "x" not in record or "y" not in record:
        missing = [k for k in ("x", "y") if k not in record]
        raise TrainerInputError(f"{where}: record lacks {', '.join(missing)} (keys: {sorted(record)})")
    x, y = record["x"], record["y"]
    if not isinstance(x, list):
        raise TrainerInputError(f"{where}: 'x' must be a list of numbers, got {type(x).__name__}")
    if task == "classification":
        if isinstance(y, bool) or not isinstance(y, int) or y < 0:
            raise TrainerInputError(f"{where}: 'y' must be a class index (int >= 0), got {y!r}")
    else:
        ok = isinstance(y, int | float) and not isinstance(y, bool)
        ok = ok or (isinstance(y, list) and all(isinstance(v, int | float) and not isinstance(v, bool) for v in y))
        if not ok:
            raise TrainerInputError(f"{where}: 'y' must be a number or a list of numbers, got {y!r}")
    return x, y


def to_tensors(xs: list[Any], ys: list[Any], task: str, wheres: list[str]) -> tuple[torch.Tensor, torch.Tensor]:
    """Stack records; on a ragged or non-numeric `x`, find and name the first bad line."""
    try:
        x = _float_tensor(xs)
        if task == "classification":
            y = torch.tensor(ys, dtype=torch.long)
        else:
            y = torch.tensor(ys, dtype=torch.float32)
            y = y.view(len(ys), -1)
        return x, y
    except (TypeError, ValueError, RuntimeError) as exc:
        first = _shape(xs[0], wheres[0])
        first_y = len(ys[0]) if isinstance(ys[0], list) else None
        for xi, yi, where in zip(xs, ys, wheres, strict=True):
            if _shape(xi, where) != first:
                raise TrainerInputError(
                    f"{where}: 'x' has shape {_shape(xi, where)}, earlier records {first}"
                ) from None
            if (len(yi) if isinstance(yi, list) else None) != first_y:
                raise TrainerInputError(f"{where}: 'y' has a different length than earlier records") from None
        raise TrainerInputError(f"{wheres[0]}...: records do not form a tensor: {exc}") from None


def _float_tensor(xs: list[Any]) -> torch.Tensor:
    """float32 tensor of nested number lists. numpy builds it about 3x faster than `torch.tensor`
    (bench/: the streaming reader's biggest cost); anything but numbers (strings, None) is refused
    as `torch.tensor` would refuse it, rather than parsed."""
    array = np.array(xs)
    if array.dtype.kind not in "biuf":
        raise TypeError(f"'x' values must be numbers, found {array.dtype} values")
    return torch.from_numpy(array.astype(np.float32, copy=False))


@dataclass
class Examples:
    x: torch.Tensor
    y: torch.Tensor
    wheres: list[str]


def read_examples(files: list[Path], task: str, field: str) -> Examples:
    """Read every record of small data into memory (map-style)."""
    xs: list[Any] = []
    ys: list[Any] = []
    wheres: list[str] = []
    for path in files:
        count = 0
        with open(path, "rb") as fh:
            for lineno, raw in enumerate(fh, start=1):
                if not raw.strip():
                    continue
                where = f"{path}:{lineno}"
                x, y = check_record(parse_line(raw, where), task, where)
                xs.append(x)
                ys.append(y)
                wheres.append(where)
                count += 1
        if count == 0:
            raise TrainerInputError(f"{field}: {path} is empty (no JSONL records)")
    x, y = to_tensors(xs, ys, task, wheres)
    return Examples(x, y, wheres)


class ExampleDataset(Dataset[tuple[torch.Tensor, torch.Tensor, torch.Tensor]]):
    """Map-style dataset over in-memory examples; items carry their indices for tracing.

    Indexed by a whole batch of indices (the loop's loader uses a `BatchSampler`): one batch is
    three tensor gathers instead of `batch_size` item fetches and a collate, which cut the
    trainer's data wait about threefold (docs/benchmarks.md). An int index gives one example."""

    def __init__(self, examples: Examples) -> None:
        self.examples = examples

    def __len__(self) -> int:
        return len(self.examples.wheres)

    def __getitem__(self, index: int | list[int]) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        i = torch.as_tensor(index)
        return self.examples.x[i], self.examples.y[i], i


def batches_per_epoch(num_records: int, world_size: int, batch_size: int) -> int:
    """Batches each rank gets from `DistributedSampler` (which pads to equal shares)."""
    per_rank = math.ceil(num_records / world_size)
    return math.ceil(per_rank / batch_size)

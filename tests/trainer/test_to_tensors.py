"""`to_tensors` builds x with numpy (faster than torch.tensor; see docs/benchmarks.md): same values,
and anything but numbers is still refused with the record's place, never parsed."""

from __future__ import annotations

import pytest
import torch
from trainer.data.jsonl import to_tensors
from trainer.errors import TrainerInputError


def test_same_values_as_torch_tensor() -> None:
    xs = [[0.1, 2, 3.3333333333, -1e-30], [1e30, 0, True, 7]]
    x, y = to_tensors(xs, [1, 0], "classification", ["f:1", "f:2"])
    assert x.dtype == torch.float32 and torch.equal(x, torch.tensor(xs, dtype=torch.float32))
    assert y.dtype == torch.long and y.tolist() == [1, 0]


def test_nested_x_keeps_its_shape() -> None:
    x, _ = to_tensors([[[1, 2], [3, 4]], [[5, 6], [7, 8]]], [0.5, 1.5], "regression", ["f:1", "f:2"])
    assert x.shape == (2, 2, 2)


@pytest.mark.parametrize("bad", ["1.5", None, "x"])
def test_non_numbers_are_refused_not_parsed(bad: object) -> None:
    with pytest.raises(TrainerInputError, match="f:1"):
        to_tensors([[1.0, bad], [1.0, 2.0]], [0, 1], "classification", ["f:1", "f:2"])


def test_ragged_record_is_named() -> None:
    with pytest.raises(TrainerInputError, match=r"f:2: 'x' has shape \(3,\)"):
        to_tensors([[1.0, 2.0], [1.0, 2.0, 3.0]], [0, 1], "classification", ["f:1", "f:2"])

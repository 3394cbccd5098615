"""Models by name: a small registry of built-in examples, or any `package.module:build_fn`.

A model also says what its JSONL records look like (`x`, `y`) and whether it is a classifier
(cross-entropy, accuracy) or a regressor (mean squared error).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from ..errors import TrainerInputError


class DigitsConvNet(nn.Module):
    """A ConvNet for scikit-learn's 8x8 digits: 64 pixels in [0, 1] -> 10 classes. No dropout,
    so training is a deterministic function of the data order and the seed."""

    def __init__(self, channels: int = 16, hidden: int = 64) -> None:
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(1, channels, 3, padding=1),
            nn.ReLU(),
            nn.Conv2d(channels, 2 * channels, 3, padding=1),
            nn.ReLU(),
            nn.MaxPool2d(2),
        )
        self.head = nn.Sequential(nn.Flatten(), nn.Linear(2 * channels * 16, hidden), nn.ReLU(), nn.Linear(hidden, 10))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.features(x.view(-1, 1, 8, 8)))


class MLPRegression(nn.Module):
    """A small MLP for toy regression: `in_features` numbers -> `out_features` numbers."""

    def __init__(self, in_features: int, out_features: int = 1, hidden: int = 32, layers: int = 1) -> None:
        super().__init__()
        mods: list[nn.Module] = []
        width = in_features
        for _ in range(layers):
            mods += [nn.Linear(width, hidden), nn.ReLU()]
            width = hidden
        mods.append(nn.Linear(width, out_features))
        self.net = nn.Sequential(*mods)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)


@dataclass
class ModelSpec:
    """How to build a model and read its records. `task` is `classification` or `regression`."""

    name: str
    task: str
    build: Callable[[dict[str, Any], tuple[int, ...], int], nn.Module]

    def loss(self, output: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        if self.task == "classification":
            return nn.functional.cross_entropy(output.float(), y)
        return nn.functional.mse_loss(output.float().view_as(y), y)


def _kwargs(name: str, fn: Callable[..., nn.Module], args: dict[str, Any], **fixed: Any) -> nn.Module:
    try:
        return fn(**{**fixed, **args})
    except TypeError as exc:
        raise TrainerInputError(f"model {name!r}: bad model_args {args}: {exc}") from exc


def _build_digits(args: dict[str, Any], x_shape: tuple[int, ...], y_dim: int) -> nn.Module:
    if x_shape != (64,):
        raise TrainerInputError(f"model 'digits' needs records with 64 pixel values in x, got shape {x_shape}")
    return _kwargs("digits", DigitsConvNet, args)


def _build_mlp(args: dict[str, Any], x_shape: tuple[int, ...], y_dim: int) -> nn.Module:
    if len(x_shape) != 1:
        raise TrainerInputError(f"model 'mlp-regression' needs a flat list of numbers in x, got shape {x_shape}")
    return _kwargs("mlp-regression", MLPRegression, args, in_features=x_shape[0], out_features=y_dim)


BUILTINS: dict[str, ModelSpec] = {
    "digits": ModelSpec("digits", "classification", _build_digits),
    "mlp-regression": ModelSpec("mlp-regression", "regression", _build_mlp),
}


def resolve(name: str, config: Any) -> ModelSpec:
    """A built-in by name, or `package.module:build_fn` called as `build_fn(config)`.

    A user module may set a `task` attribute (`classification`/`regression`, default
    classification) to choose the loss."""
    if name in BUILTINS:
        return BUILTINS[name]
    if ":" not in name:
        raise TrainerInputError(
            f"unknown model {name!r}: use one of {', '.join(sorted(BUILTINS))} or 'package.module:build_fn'"
        )
    module_name, _, fn_name = name.partition(":")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise TrainerInputError(f"model {name!r}: cannot import {module_name!r}: {exc}") from exc
    fn = getattr(module, fn_name, None)
    if not callable(fn):
        raise TrainerInputError(f"model {name!r}: {module_name!r} has no callable {fn_name!r}")

    def build(args: dict[str, Any], x_shape: tuple[int, ...], y_dim: int) -> nn.Module:
        model = fn(config)
        if not isinstance(model, nn.Module):
            raise TrainerInputError(f"model {name!r}: {fn_name}() returned {type(model).__name__}, not nn.Module")
        return model

    task = getattr(module, "task", "classification")
    if task not in ("classification", "regression"):
        raise TrainerInputError(f"model {name!r}: module attribute task={task!r}, expected classification/regression")
    return ModelSpec(name, task, build)

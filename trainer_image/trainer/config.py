"""The flat training config: a YAML/JSON file, then `--field-name VALUE` flags on top.

Every value can arrive as text (flags, SageMaker hyperparameters), so each field knows how to
read itself from a string; a wrong type stops with the field's name, the value and what fits.
The flags are an argparse parser generated from `TrainConfig` (one option per field, its text
read by `coerce`); argparse's own refusals become `TrainerInputError`s, one line and exit 2.
"""

from __future__ import annotations

import argparse
import dataclasses
import difflib
import functools
import json
import os
import re
import types
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NoReturn

import yaml

from .errors import TrainerInputError

CHOICES: dict[str, tuple[str, ...]] = {
    "optimizer": ("adamw", "sgd"),
    "lr_schedule": ("cosine", "constant"),
    "precision": ("fp32", "bf16", "fp16"),
    "strategy": ("ddp", "fsdp"),
    "backend": ("auto", "nccl", "gloo"),
    "stragglers": ("warn", "exclude"),
    "deterministic": ("auto", "true", "false"),
}
POSITIVE = ("batch_size", "global_batch_size", "epochs", "max_steps", "grad_accum", "checkpoint_every",
            "log_every", "timeout_s", "keep_checkpoints", "hang_timeout", "startup_timeout")  # fmt: skip
NON_NEGATIVE = ("warmup_steps", "num_workers", "clip_grad", "weight_decay", "seed", "shuffle_buffer")


def _f(default: Any, doc: str) -> Any:
    """A config field with its documentation (docs/contracts.md's table is generated from these)."""
    return field(default=default, metadata={"doc": doc})


@dataclass
class TrainConfig:
    """The trainer's config: the one definition of the SDK-trainer contract (docs/contracts.md
    section 2 is generated from it; the SDK's `trainer:` section is checked against it by
    tests/test_trainer_contract.py)."""

    train_data: str = _f(
        "",
        "a JSONL file, directory of `*.jsonl`, or glob (or `.bin` token shards, docs/trainer.md); `${VAR}` is expanded",
    )
    model: str = _f("digits", "`digits`, `mlp-regression`, or `package.module:build_fn` (called with the config)")
    model_args: dict[str, Any] = field(
        default_factory=dict, metadata={"doc": "passed to the model builder (`digits`: channels, hidden)"}
    )
    val_data: str | None = _f(None, "same forms as train_data; evaluated after every epoch")
    streaming: bool = _f(False, "rank-sharded streaming reader instead of map-style + DistributedSampler")
    shuffle_buffer: int = _f(
        0, "streaming: records in the seeded shuffle buffer (0 = file order); its state is saved in checkpoints"
    )
    batch_size: int = _f(32, "per process, per micro-step")
    global_batch_size: int | None = _f(None, "sets `batch_size = global / (world_size x grad_accum)`; must divide")
    epochs: int = _f(1, "passes over the data")
    max_steps: int | None = _f(None, "optimizer steps; stops early (the LR schedule spans these steps)")
    optimizer: str = _f("adamw", "SGD uses momentum 0.9")
    lr: float = _f(1e-3, "peak learning rate")
    weight_decay: float = _f(0.0, "decoupled (AdamW) or L2 (SGD)")
    lr_schedule: str = _f("cosine", "linear warmup, then cosine to 10% of `lr` (or constant)")
    warmup_steps: int = _f(0, "optimizer steps of linear warmup")
    grad_accum: int = _f(1, "micro-steps per optimizer step; no gradient all-reduce on the non-final ones")
    clip_grad: float = _f(1.0, "max global grad norm; 0 = off")
    precision: str = _f("fp32", "`torch.autocast`; GradScaler for fp16")
    strategy: str = _f("ddp", "FSDP is `fully_shard` (FSDP2)")
    backend: str = _f("auto", "auto = nccl with CUDA, else gloo")
    seed: int = _f(0, "same initial weights on every rank; per-rank streams after that")
    deterministic: str = _f(
        "auto",
        "`true`: deterministic algorithms, so a resumed run is bit-identical to an uninterrupted one (on an H100 "
        "1.41x the step time, docs/trainer.md); `false`: faster kernels (cuDNN benchmarks its algorithms); "
        "`auto`: true on CPU, false on CUDA",
    )
    compile: bool = _f(
        False,
        "`torch.compile` the model (nanoGPT, torchtitan): faster steps after a first step that compiles "
        "(its seconds are in the log and summary.json); checkpoints keep the model's own keys",
    )
    num_workers: int = _f(0, "DataLoader workers (map-style data)")
    checkpoint_dir: str | None = _f(None, "default `$TRAINER_CHECKPOINT_DIR`, else `OUTPUT_DIR/checkpoints`")
    checkpoint_every: int = _f(100, "steps; also always at the end")
    checkpoint_async: bool = _f(
        False,
        "ddp only: the loop waits only for a CPU copy of the state; write, fsync, CRC check and publish "
        "run in a background thread, one at a time",
    )
    keep_checkpoints: int = _f(3, "the newest N complete checkpoints are kept")
    resume: str = _f("auto", "`auto`, `never`, or a `step-*` directory or checkpoint root")
    output_dir: str | None = _f(None, "default `$TRAINER_OUTPUT_DIR`, else `./output`: metrics, TensorBoard, summary")
    log_every: int = _f(10, "steps between metrics lines")
    timeout_s: int = _f(1800, "process-group timeout: a hung collective fails after this")
    hang_timeout: int | None = _f(
        None,
        "seconds without a completed step before the watchdog declares a hang (exit 200, failure.json); "
        "less than timeout_s; none = adaptive: 10 x the slowest of the last 100 steps, at least 60 s, "
        "300 s until 10 steps are done, at most 0.8 x timeout_s (docs/trainer.md)",
    )
    startup_timeout: int | None = _f(
        None,
        "seconds the start (rendezvous, process group, data, model, resume) may take before the watchdog declares "
        "a hang; none = max(30 s, 6 x hang_timeout) with hang_timeout, else 300 s, plus 20 ms per rank, at most "
        "0.8 x timeout_s (docs/trainer.md)",
    )
    straggler_factor: float = _f(
        2.0,
        "a rank whose compute time per step (its mean over 20 steps) is above this x the median of all ranks is slow",
    )
    stragglers: str = _f(
        "warn", "`warn`: report slow nodes (log, metrics, slow_nodes.json); `exclude`: also checkpoint and exit 201"
    )

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


FIELDS = {f.name: f for f in dataclasses.fields(TrainConfig)}
_HINTS = typing.get_type_hints(TrainConfig)


def _base_type(name: str) -> tuple[type, bool]:
    """(type, optional) of a field: `int | None` -> (int, True)."""
    hint = _HINTS[name]
    origin = typing.get_origin(hint)
    if origin in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(hint) if a is not type(None)]
        return typing.get_origin(args[0]) or args[0], True
    return origin or hint, False


def _bad(name: str, value: Any, expected: str) -> TrainerInputError:
    return TrainerInputError(f"config field {name!r}: got {value!r}, expected {expected}")


def coerce(name: str, value: Any, from_text: bool) -> Any:
    """Check (and for text, parse) one value for field `name`."""
    kind, optional = _base_type(name)
    if value is None or (from_text and optional and value in ("", "none", "null", "None")):
        if optional:
            return None
        raise _bad(name, value, f"a {kind.__name__}")
    if kind is bool:
        if isinstance(value, bool):
            return value
        if isinstance(value, str) and value.lower() in ("true", "false"):
            return value.lower() == "true"
        raise _bad(name, value, "true or false")
    if kind is int:
        if isinstance(value, bool):
            raise _bad(name, value, "an integer")
        if isinstance(value, int):
            return value
        if isinstance(value, str) and re.fullmatch(r"[+-]?\d+", value.strip()):
            return int(value)
        if isinstance(value, float) and value.is_integer():
            return int(value)
        raise _bad(name, value, "an integer")
    if kind is float:
        if isinstance(value, int | float) and not isinstance(value, bool):
            return float(value)
        if isinstance(value, str):
            try:
                return float(value)
            except ValueError:
                pass
        raise _bad(name, value, "a number")
    if kind is dict:
        if isinstance(value, str) and from_text:
            try:
                value = json.loads(value)
            except ValueError as exc:
                raise _bad(name, value, f"a JSON object ({exc})") from exc
        if isinstance(value, dict):
            return value
        raise _bad(name, value, "a mapping (JSON object text on the command line)")
    if kind is str:
        if isinstance(value, bool) and "true" in CHOICES.get(name, ()):
            return flag_text(value)  # `deterministic: true` in a YAML file is a bool; its choice is the text
        if isinstance(value, str):
            return value
        raise _bad(name, value, "a string")
    raise AssertionError(f"unhandled field type for {name}")


def _unknown(name: str) -> TrainerInputError:
    close = difflib.get_close_matches(name, FIELDS, n=1)
    hint = f"; did you mean {close[0]!r}?" if close else ""
    return TrainerInputError(f"unknown config field {name!r}{hint} (fields: {', '.join(FIELDS)})")


def load_file(path: str) -> dict[str, Any]:
    p = Path(path)
    if not p.is_file():
        raise TrainerInputError(f"--config {path}: no such file")
    try:
        data = yaml.safe_load(p.read_text())
    except yaml.YAMLError as exc:
        raise TrainerInputError(f"--config {path}: not valid YAML/JSON: {exc}") from exc
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise TrainerInputError(f"--config {path}: expected a mapping of field: value")
    return data


class _Refuse(argparse.ArgumentParser):
    """argparse that raises instead of printing its usage and exiting: train.py turns the error into
    one line, the status file the launcher reads, and exit 2."""

    def error(self, message: str) -> NoReturn:
        raise TrainerInputError(message)


_NO_VALUE = object()
"""What an option given without a value parses to (argparse's `const` of `nargs="?"`)."""


def _parser() -> argparse.ArgumentParser:
    """`--config FILE` and one `--field-name VALUE` per TrainConfig field, its text read by `coerce`.
    No abbreviations: an option is a field's exact name, or it is refused with a did-you-mean."""
    parser = _Refuse(
        prog="python -m trainer.train", add_help=False, allow_abbrev=False,
        usage="%(prog)s [--config FILE] [--field-name VALUE ...]",
        description="Booleans are true/false, dicts JSON text, `none` clears an optional value; flags win over --config.",
    )  # fmt: skip
    parser.add_argument("--config", metavar="FILE", nargs="?", const=_NO_VALUE, help="a YAML/JSON file of field: value")
    for name, f in FIELDS.items():
        choices = f" ({'|'.join(CHOICES[name])})" if name in CHOICES else ""
        help_text = f"{f.metadata['doc']}; default {default_of(name)!r}{choices}".replace("%", "%%")
        dashed = "--" + name.replace("_", "-")
        # `--checkpoint_dir X` is the spelling SageMaker's toolkit passes a script's hyperparameters in
        # (sagemaker_training/mapping.py to_cmd_args): the same option, left out of --help
        for option, text in [(dashed, help_text)] + ([("--" + name, argparse.SUPPRESS)] if "_" in name else []):
            parser.add_argument(option, dest=name, metavar="VALUE", nargs="?", const=_NO_VALUE,
                                default=argparse.SUPPRESS, help=text,
                                type=functools.partial(coerce, name, from_text=True))  # fmt: skip
    return parser


def parse_flags(argv: list[str]) -> tuple[str | None, dict[str, Any]]:
    """`--config F --batch-size 8 --lr=0.1` -> ('F', {'batch_size': 8, 'lr': 0.1}): typed values."""
    given, rest = _parser().parse_known_args(argv)
    values = vars(given)
    for name, value in values.items():
        if value is _NO_VALUE:
            flag = f"--{name.replace('_', '-')}"
            dashed = next((r for r in rest if r.startswith("-") and not r.startswith("--")), None)
            hint = f" (a value that starts with '-' is written {flag}={dashed})" if dashed else ""
            raise TrainerInputError(f"option {flag} needs a value{hint}")
    if rest:
        first = rest[0]
        if not first.startswith("--"):
            raise TrainerInputError(f"unexpected argument {first!r}: every option is --field-name VALUE")
        raise _unknown(first[2:].partition("=")[0].replace("-", "_"))
    config_path = values.pop("config", None)
    return config_path, values


def _expand(name: str, value: str | None) -> str | None:
    """`${TRAINER_DATA_TRAIN}/x.jsonl` -> the path; an unset variable is an error, not a literal."""
    if value is None:
        return None
    expanded = os.path.expandvars(value)
    leftover = re.search(r"\$\{?([A-Za-z_][A-Za-z0-9_]*)", expanded)
    if leftover:
        raise TrainerInputError(f"config field {name!r}: environment variable {leftover.group(1)} is not set")
    return expanded


def build_config(argv: list[str]) -> TrainConfig:
    config_path, flags = parse_flags(argv)
    merged: dict[str, Any] = {}
    if config_path:
        for name, value in load_file(config_path).items():
            key = str(name).replace("-", "_")
            if key not in FIELDS:
                raise _unknown(key)
            merged[key] = coerce(key, value, from_text=False)
    merged.update(flags)
    cfg = TrainConfig(**merged)
    validate(cfg)
    return cfg


def validate(cfg: TrainConfig) -> None:
    if not cfg.train_data:
        raise TrainerInputError("config field 'train_data' is required (a JSONL file, directory or glob)")
    for name, allowed in CHOICES.items():
        value = getattr(cfg, name)
        if value not in allowed:
            raise _bad(name, value, " or ".join(allowed))
    for name in POSITIVE:
        value = getattr(cfg, name)
        if value is not None and value <= 0:
            raise _bad(name, value, "a positive number")
    for name in NON_NEGATIVE:
        if getattr(cfg, name) < 0:
            raise _bad(name, getattr(cfg, name), "zero or more")
    cfg.train_data = _expand("train_data", cfg.train_data) or ""
    cfg.val_data = _expand("val_data", cfg.val_data)
    out = _expand("output_dir", cfg.output_dir) or os.environ.get("TRAINER_OUTPUT_DIR") or "./output"
    cfg.output_dir = out
    ckpt = _expand("checkpoint_dir", cfg.checkpoint_dir) or os.environ.get("TRAINER_CHECKPOINT_DIR")
    cfg.checkpoint_dir = ckpt or str(Path(out) / "checkpoints")
    for name in ("hang_timeout", "startup_timeout"):
        if (value := getattr(cfg, name)) is not None and value >= cfg.timeout_s:
            raise _bad(name, value, f"less than timeout_s ({cfg.timeout_s}), or none (adaptive)")
    if cfg.straggler_factor <= 1:
        raise _bad("straggler_factor", cfg.straggler_factor, "a number above 1")
    if cfg.checkpoint_async and cfg.strategy != "ddp":
        raise _bad("checkpoint_async", True, f"false with strategy {cfg.strategy!r} (FSDP shards are saved in step)")
    if cfg.resume not in ("auto", "never"):
        cfg.resume = _expand("resume", cfg.resume) or ""


def flag_text(value: Any) -> str:
    """A value in the text form `coerce` reads back: true/false, compact JSON with sorted keys for
    dicts and lists, else str. The one flag encoding: the SDK's copy is checked against this one."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, dict | list):
        return json.dumps(value, sort_keys=True, separators=(",", ":"))
    return str(value)


def default_of(name: str) -> Any:
    f = FIELDS[name]
    return f.default_factory() if f.default_factory is not dataclasses.MISSING else f.default


def _type_text(name: str) -> str:
    if name in CHOICES:
        return "\\|".join(CHOICES[name]).join("``")
    kind = _base_type(name)[0].__name__
    return f"{kind} > 0" if name in POSITIVE else f"{kind} >= 0" if name in NON_NEGATIVE else kind


def _default_text(name: str) -> str:
    value = default_of(name)
    if value == "" and name == "train_data":
        return "required"
    return "none" if value is None else f"`{flag_text(value)}`"


def reference_table() -> str:
    """The markdown table of every field (docs/contracts.md section 2 holds exactly this)."""
    rows = ["| field | type | default | |", "|---|---|---|---|"]
    for name, f in FIELDS.items():
        rows.append(f"| `{name}` | {_type_text(name)} | {_default_text(name)} | {f.metadata['doc']} |")
    return "\n".join(rows) + "\n"


def help_text() -> str:
    return _parser().format_help()

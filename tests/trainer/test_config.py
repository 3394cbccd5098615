"""The flat config: file, then flags; text forms as SageMaker hyperparameters carry them."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from trainer.config import build_config
from trainer.errors import TrainerInputError


def test_defaults(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("TRAINER_OUTPUT_DIR", raising=False)
    monkeypatch.delenv("TRAINER_CHECKPOINT_DIR", raising=False)
    cfg = build_config(["--train-data", "d.jsonl"])
    assert (cfg.model, cfg.batch_size, cfg.lr, cfg.optimizer, cfg.lr_schedule, cfg.precision) == (
        "digits", 32, 1e-3, "adamw", "cosine", "fp32",
    )  # fmt: skip
    assert (cfg.output_dir, cfg.checkpoint_dir, cfg.resume, cfg.timeout_s) == (
        "./output", "output/checkpoints", "auto", 1800,
    )  # fmt: skip


def test_file_then_flags_win(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TRAINER_DATA_TRAIN", "/data/train")
    monkeypatch.setenv("TRAINER_CHECKPOINT_DIR", "/ckpt")
    (tmp_path / "c.yaml").write_text(
        "train_data: ${TRAINER_DATA_TRAIN}/x.jsonl\nbatch_size: 8\nmodel_args: {hidden: 4}\nstreaming: true\n"
    )
    cfg = build_config(["--config", str(tmp_path / "c.yaml"), "--batch-size", "16", "--lr=0.5",
                        "--model-args", json.dumps({"hidden": 9}), "--streaming", "false",
                        "--max-steps", "none"])  # fmt: skip
    assert cfg.train_data == "/data/train/x.jsonl"
    assert (cfg.batch_size, cfg.lr, cfg.model_args, cfg.streaming, cfg.max_steps) == (
        16,
        0.5,
        {"hidden": 9},
        False,
        None,
    )
    assert cfg.checkpoint_dir == "/ckpt"
    (tmp_path / "c.json").write_text(json.dumps({"train_data": "a", "epochs": 4, "lr": 1}))
    assert build_config(["--config", str(tmp_path / "c.json")]).lr == 1.0


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--train-data", "d", "--streaming", "yes"], "'streaming': got 'yes', expected true or false"),
        (["--train-data", "d", "--lr", "fast"], "'lr': got 'fast', expected a number"),
        (["--train-data", "d", "--model-args", "{nope"], "'model_args'"),
        (["--train-data", "d", "--optimizer", "lamb"], "'optimizer': got 'lamb', expected adamw or sgd"),
        (["--train-data", "d", "--grad-accum", "0"], "'grad_accum': got 0, expected a positive number"),
        (["--batch-size", "3"], "'train_data' is required"),
        (["--train-data"], "needs a value"),
        (["stray"], "unexpected argument 'stray'"),
    ],
)
def test_bad_values_name_the_field(argv: list[str], message: str) -> None:
    with pytest.raises(TrainerInputError, match=None) as info:
        build_config(argv)
    assert message in str(info.value)


def test_the_flags_are_the_dataclass_and_nothing_else() -> None:
    """The parser is generated from TrainConfig: every field is an option, an abbreviation is not."""
    from trainer.config import FIELDS, help_text

    shown = help_text()
    assert all(f"--{name.replace('_', '-')}" in shown for name in FIELDS)
    with pytest.raises(TrainerInputError, match="unknown config field 'lr_sched'; did you mean 'lr_schedule'"):
        build_config(["--train-data", "d", "--lr-sched", "constant"])
    with pytest.raises(TrainerInputError, match="written --lr=-1e-3"):
        build_config(["--train-data", "d", "--lr", "-1e-3"])
    assert build_config(["--train-data", "d", "--lr=-1e-3"]).lr == -1e-3


def test_the_toolkits_underscore_spelling_is_the_same_option() -> None:
    """SageMaker's toolkit passes a script's hyperparameters as `--checkpoint_dir X` (sagemaker_training/mapping.py
    to_cmd_args), and the SDK's estimator runs the trainer that way: both spellings set the field, and --help
    shows the dashed one only."""
    from trainer.config import help_text

    cfg = build_config(["--train_data", "d", "--checkpoint_dir", "/opt/ml/checkpoints", "--keep-checkpoints", "2"])
    assert (cfg.train_data, cfg.checkpoint_dir, cfg.keep_checkpoints) == ("d", "/opt/ml/checkpoints", 2)
    assert "--checkpoint_dir" not in help_text()


def test_deterministic_is_auto_by_default_and_reads_yamls_booleans(tmp_path: Path) -> None:
    """`deterministic: auto` is the default (issue 40); YAML's `deterministic: true` is a bool, read as the choice."""
    assert build_config(["--train-data", "d.jsonl"]).deterministic == "auto"
    (tmp_path / "c.yaml").write_text("train_data: d.jsonl\ndeterministic: true\n")
    assert build_config(["--config", str(tmp_path / "c.yaml")]).deterministic == "true"
    assert build_config(["--train-data", "d.jsonl", "--deterministic", "false"]).deterministic == "false"
    with pytest.raises(TrainerInputError, match="'deterministic': got 'yes', expected auto or true or false"):
        build_config(["--train-data", "d.jsonl", "--deterministic", "yes"])


@pytest.mark.parametrize(
    ("setting", "cuda", "on", "words"),
    [
        ("auto", False, True, "on (auto on CPU"),
        ("auto", True, False, "off (auto on CUDA; deterministic: true makes a resume bit-identical at 1.41x"),
        ("true", True, True, "on (deterministic: true)"),
        ("false", False, False, "off (deterministic: false)"),
    ],
)
def test_deterministic_auto_is_on_for_cpu_and_off_on_cuda(setting: str, cuda: bool, on: bool, words: str) -> None:
    from trainer.checkpoint.rng import deterministic_mode

    got, said = deterministic_mode(setting, cuda)
    assert got is on and said.startswith(words), said

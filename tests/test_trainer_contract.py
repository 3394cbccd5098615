"""The SDK-trainer contract, defined once by the trainer (`trainer.config.TrainConfig`) and checked here.

The SDK never imports the trainer at runtime, so its `trainer:` section, the job fields it turns
into trainer flags, and its flag encoding are copies; these tests fail as soon as one drifts from
the trainer's definition, and so does docs/contracts.md's table (generated from TrainConfig).
"""

from __future__ import annotations

import ast
import types
import typing
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError
from trainctl.job import Checkpoint, Job, TrainerConfig
from trainctl.spec.trainer import BUILTIN_MODELS
from trainctl.targets import program
from trainer import config as trainer_config

ROOT = Path(__file__).resolve().parents[1]
CONTRACTS = ROOT / "docs" / "contracts.md"
TRAINER_FIELDS = set(trainer_config.FIELDS)
FROM_DATA = {"train_data", "val_data"}  # the SDK's None means "the job's data input of that name"


def _base(hint: Any) -> tuple[Any, bool]:
    """(type, optional) of an annotation; a Literal of strings counts as str."""
    optional = False
    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(hint) if a is not type(None)]
        optional, hint = True, args[0]
    if typing.get_origin(hint) is typing.Literal:
        return str, optional
    return typing.get_origin(hint) or hint, optional


def test_every_trainer_field_has_exactly_one_source_in_the_sdk() -> None:
    section = set(TrainerConfig.model_fields)
    sources = [section, set(program.CHECKPOINT_FLAGS), set(program.TARGET_FLAGS)]
    assert set.union(*sources) == TRAINER_FIELDS, "fields the SDK cannot set, or fields the trainer does not know"
    assert sum(len(s) for s in sources) == len(TRAINER_FIELDS), "a trainer field set from two places"


@pytest.mark.parametrize("name", sorted(TrainerConfig.model_fields))
def test_section_field_matches_the_trainer(name: str) -> None:
    sdk = TrainerConfig.model_fields[name]
    sdk_type, sdk_optional = _base(sdk.annotation)
    trainer_type, trainer_optional = _base(trainer_config._HINTS[name])
    assert sdk_type is trainer_type, f"trainer: {name}: SDK {sdk.annotation}, trainer {trainer_config._HINTS[name]}"
    default = sdk.get_default(call_default_factory=True)
    if name in FROM_DATA:
        assert default is None and sdk_optional
    else:
        assert sdk_optional == trainer_optional, f"trainer.{name}: optional in one side only"
        assert default == trainer_config.default_of(name), f"trainer.{name}: default differs"
    if name in trainer_config.CHOICES:
        assert typing.get_args(sdk.annotation) == trainer_config.CHOICES[name], f"trainer.{name}: choices differ"


@pytest.mark.parametrize(
    ("name", "bad"),
    [(n, 0) for n in trainer_config.POSITIVE if n in TrainerConfig.model_fields]
    + [(n, -1) for n in trainer_config.NON_NEGATIVE if n in TrainerConfig.model_fields],
)
def test_the_sdk_refuses_what_the_trainer_refuses(name: str, bad: int) -> None:
    with pytest.raises(ValidationError):
        TrainerConfig(**{name: bad})


@pytest.mark.parametrize(("flag", "name"), sorted(program.CHECKPOINT_FLAGS.items()))
def test_checkpoint_fields_match_the_trainer(flag: str, name: str) -> None:
    sdk = Checkpoint.model_fields[name]
    assert _base(sdk.annotation)[0] is _base(trainer_config._HINTS[flag])[0]
    assert sdk.get_default() == trainer_config.default_of(flag), f"checkpoint.{name} vs {flag}: default differs"
    if flag in trainer_config.POSITIVE:
        with pytest.raises(ValidationError):
            Checkpoint(**{name: 0})


def test_a_job_reaches_the_trainer_unchanged(tmp_path: Path) -> None:
    """Every SDK-settable field at a non-default value, rendered to flags, parsed by the trainer."""
    values: dict[str, Any] = {
        "model": "pkg.mod:build", "model_args": {"z": [1, 2], "a": {"b": True}}, "streaming": True, "shuffle_buffer": 64,
        "batch_size": 7, "global_batch_size": 56, "epochs": 3, "max_steps": 11, "optimizer": "sgd",
        "lr": 0.25, "weight_decay": 0.01, "lr_schedule": "constant", "warmup_steps": 2, "grad_accum": 4,
        "clip_grad": 0.5, "precision": "bf16", "strategy": "fsdp", "backend": "gloo", "seed": 9,
        "deterministic": "false", "compile": True, "num_workers": 2, "log_every": 3, "timeout_s": 60, "train_data": "/d/train.jsonl", "val_data": "/d/val.jsonl",
        "hang_timeout": 45, "startup_timeout": 50, "straggler_factor": 1.25, "stragglers": "exclude",
    }  # fmt: skip
    assert set(values) == set(TrainerConfig.model_fields), "give every section field a value"
    job = Job.model_validate(
        {"name": "contract", "trainer": values, "checkpoint": {"every_steps": 5, "keep": 2, "resume": "/c/step-1"}}
    )
    argv = program.program_argv(job, data_paths={}, checkpoint_dir="/ckpt", output_dir="/out")
    assert argv[:3] == ["python", "-m", "trainer.train"]
    cfg = trainer_config.build_config(argv[3:])
    expected = {
        **values,
        "checkpoint_every": 5,
        "keep_checkpoints": 2,
        "resume": "/c/step-1",
        "checkpoint_async": False,
    }
    expected |= {"checkpoint_dir": "/ckpt", "output_dir": "/out"}
    assert cfg.to_dict() == expected


@pytest.mark.parametrize(
    "value",
    [True, False, 0, -3, 2.5, 1e-4, "digits", "", "a b", {"b": 1, "a": [2, {"d": None, "c": "x"}]}, [3, 1], {}, "é"],
)
def test_one_flag_encoding(value: Any) -> None:
    assert program.flag_text(value) == trainer_config.flag_text(value)


def test_the_sdk_copy_of_the_flag_encoding_is_the_trainers() -> None:
    """Same source, not only the same outputs on the values above."""

    def body(path: Path, name: str) -> str:
        fn = next(n for n in ast.parse(path.read_text()).body if isinstance(n, ast.FunctionDef) and n.name == name)
        fn.body = fn.body[1:]  # the docstrings differ: each says where it lives
        return ast.unparse(fn)

    sdk = body(ROOT / "sdk" / "trainctl" / "targets" / "program.py", "flag_text")
    assert sdk == body(ROOT / "trainer_image" / "trainer" / "config.py", "flag_text")


def test_the_sdks_built_in_models_are_the_trainers() -> None:
    """`trainer.model: resnet50` is refused at validate (issue 37): the SDK's list is the trainer's BUILTINS
    (read from its source: trainer/training/models.py imports torch)."""
    tree = ast.parse((ROOT / "trainer_image" / "trainer" / "training" / "models.py").read_text())
    (table,) = [n.value for n in tree.body if isinstance(n, ast.AnnAssign) and ast.unparse(n.target) == "BUILTINS"]
    assert isinstance(table, ast.Dict)
    assert set(BUILTIN_MODELS) == {ast.literal_eval(k) for k in table.keys if k is not None}


def test_contracts_md_holds_the_generated_table() -> None:
    text = CONTRACTS.read_text()
    start = text.index("| field | type | default | |")
    end = text.index("<!-- end of generated table -->", start)
    assert text[start:end] == trainer_config.reference_table(), (
        "docs/contracts.md section 2 drifted from TrainConfig; paste the output of\n"
        "  .venv/bin/python -c 'from trainer.config import reference_table; print(reference_table(), end=\"\")'"
    )


def test_one_list_of_platform_variables() -> None:
    """The launcher owns the list (trainer.launcher.platforms); the SDK's local target asks it to apply it
    (`--platform local`) instead of keeping a copy, and platform detection reads only listed names."""
    from trainer.launcher import platforms

    tree = ast.parse((ROOT / "trainer_image" / "trainer" / "launcher" / "platforms.py").read_text())
    detect = next(n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "detect_platform")
    read = {
        c.args[0].value
        for c in ast.walk(detect)
        if isinstance(c, ast.Call)
        and c.args
        and isinstance(c.args[0], ast.Constant)
        and isinstance(c.args[0].value, str)
    }
    assert read and all(platforms.is_platform_variable(name) for name in read), read

    literals = set(platforms.PLATFORM_PREFIXES)
    for path in (ROOT / "sdk" / "trainctl").rglob("*.py"):
        found = {n.value for n in ast.walk(ast.parse(path.read_text())) if isinstance(n, ast.Constant)}
        # one prefix may be a rule of its own (spec/launching.py refuses PET_* in a per_node job's env); two is a copy
        assert len(literals & found) < 2, f"{path}: a copy of the platform variable list"

    job = Job.model_validate({"name": "p", "trainer": {"train_data": "/d.jsonl"}})
    argv = job.render("local").native["argv"]
    assert argv[1:5] == ["-m", "trainer.launch", "--platform", "local"]


@pytest.mark.parametrize(("given", "flag"), [(True, "true"), (False, "false"), ("auto", None), ("true", "true")])
def test_deterministic_as_yaml_writes_it_reaches_the_trainer(given: Any, flag: str | None) -> None:
    """`deterministic: true` in a job file is YAML's bool; the SDK keeps the trainer's choice text, `auto` (the
    default) is not passed at all, and the trainer reads back what was meant."""
    job = Job.model_validate({"name": "det", "trainer": {"train_data": "/d.jsonl", "deterministic": given}})
    argv = program.program_argv(job, data_paths={}, checkpoint_dir="/ckpt", output_dir="/out")
    sent = argv[argv.index("--deterministic") + 1] if "--deterministic" in argv else None
    assert sent == flag, argv
    assert trainer_config.build_config(argv[3:]).deterministic == (flag or "auto")
    with pytest.raises(ValidationError, match="deterministic"):
        Job.model_validate({"name": "det", "trainer": {"deterministic": "sometimes"}})

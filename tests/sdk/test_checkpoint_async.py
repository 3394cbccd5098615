"""`checkpoint: {async: true}` in a job reaches the trainer as `checkpoint_async`; off by default
and then absent from the artifact (goldens unchanged)."""

from __future__ import annotations

from trainctl.job import Job
from trainctl.targets import program
from trainer import config as trainer_config


def _argv(checkpoint: dict[str, object]) -> list[str]:
    job = Job.model_validate({"name": "a", "trainer": {"train_data": "/d/t.jsonl"}, "checkpoint": checkpoint})
    return program.program_argv(job, data_paths={}, checkpoint_dir="/ckpt", output_dir="/out")


def test_async_reaches_the_trainer() -> None:
    argv = _argv({"async": True})
    assert argv[argv.index("--checkpoint-async") + 1] == "true"
    assert trainer_config.build_config(argv[3:]).checkpoint_async is True


def test_default_is_not_written() -> None:
    assert "--checkpoint-async" not in _argv({})
    assert "--checkpoint-async" not in _argv({"async": False})


def test_yaml_round_trip_keeps_the_key() -> None:
    job = Job.model_validate({"name": "a", "trainer": {"train_data": "/d"}, "checkpoint": {"async": True}})
    assert job.checkpoint.async_ is True
    assert Job.model_validate(job.model_dump(mode="json", by_alias=True)).checkpoint.async_ is True

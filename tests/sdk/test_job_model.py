"""The Job model: valid jobs load and round-trip; every invalid one fails with a message naming its field."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
from trainctl import Job, JobError
from trainctl.targets.lookup import get_target

BASE: dict[str, Any] = {"name": "digits", "trainer": {"model": "digits"}, "data": {"train": "data/train.jsonl"}}


def job_with(**changes: Any) -> dict[str, Any]:
    """BASE with dotted-path changes; a value of ... deletes the key."""
    data = copy.deepcopy(BASE)
    for dotted, value in changes.items():
        node = data
        *parents, last = dotted.split("__")
        for part in parents:
            node = node.setdefault(part, {})
        if value is ...:
            node.pop(last, None)
        else:
            node[last] = value
    return data


def problems(data: Any) -> list[str]:
    with pytest.raises(JobError) as info:
        Job.parse(data, "test.yaml")
    assert "test.yaml" in str(info.value)
    return info.value.problems


# ---------------------------------------------------------------- valid jobs


def test_minimal_trainer_job_and_defaults() -> None:
    job = Job.parse(BASE)
    assert job.resources.nodes == 1 and job.resources.nprocs == 1
    assert job.checkpoint.every_steps == 100 and job.retries == 0 and job.spot is False
    assert job.image.startswith("ghcr.io/")


def test_command_job_and_gpu_defaults() -> None:
    job = Job.parse({"name": "mine", "command": ["python", "train.py"], "resources": {"nodes": 2, "gpus_per_node": 8}})
    assert job.resources.nprocs == 8 and job.resources.world_size == 16


def test_full_job_round_trips_through_yaml() -> None:
    data = job_with(
        image="registry.example.com:5000/team/trainer@sha256:" + "a" * 64,
        resources={
            "nodes": 2,
            "procs_per_node": 4,
            "gpus_per_node": 4,
            "memory": "64Gi",
            "max_restarts": 2,
            "elastic": {"min_nodes": 1, "max_nodes": 4},
        },
        trainer__global_batch_size=256,
        trainer__grad_accum=2,
        trainer__precision="bf16",
        env={"LOG_LEVEL": "debug"},
        secrets=[{"env": "WANDB_API_KEY", "name": "wandb/key", "key": "token"}],
        max_runtime="1h30m",
        retries=2,
        spot=True,
        slurm={"partition": "gpu"},
        kubernetes={"namespace": "ml"},
        local={"python": "/usr/bin/python3"},
    )
    job = Job.parse(data)
    assert job.max_runtime_seconds == 5400 and job.resources.memory_mib == 65536
    again = Job.from_yaml_text(job.to_yaml())
    assert again == job
    assert "resources" in job.to_dict() and "checkpoint" not in job.to_dict()  # defaults are not dumped


def test_from_yaml_records_the_folder(tmp_path: Path) -> None:
    path = tmp_path / "sub" / "job.yaml"
    path.parent.mkdir()
    path.write_text("name: x\ncommand: [python, t.py]\n")
    job = Job.from_yaml(path)
    assert job.base_dir == path.parent.resolve()
    assert job.with_overrides(["retries=3"]).base_dir == job.base_dir


def test_examples_are_valid() -> None:
    root = Path(__file__).resolve().parents[2] / "examples"
    files = sorted(root.glob("*.yaml"))
    assert any(f.name == "digits.yaml" for f in files)
    for path in files:
        Job.from_yaml(path)


def test_jobs_are_frozen() -> None:
    job = Job.parse(BASE)
    from pydantic import ValidationError

    with pytest.raises(ValidationError, match="frozen"):
        job.name = "other"  # type: ignore[misc]


# ---------------------------------------------------------------- invalid jobs: the message names the field

INVALID: list[tuple[str, dict[str, Any], str, str]] = [
    # id, job, field named, a word of what is accepted
    ("name-upper", job_with(name="Digits"), "name:", "lowercase"),
    ("name-digit-first", job_with(name="1digits"), "name:", "start with a letter"),
    ("name-too-long", job_with(name="a" * 64), "name:", "at most 63"),
    ("name-trailing-dash", job_with(name="abc-"), "name:", "'-'"),
    ("name-underscore", job_with(name="my_job"), "name:", "lowercase letters, digits"),
    ("name-empty", job_with(name=""), "name:", "empty"),
    ("name-missing", job_with(name=...), "name:", "required"),
    ("name-not-string", job_with(name=12), "name:", "string"),
    ("image", job_with(image="Not An Image"), "image:", "registry/repo:tag"),
    ("image-short-digest", job_with(image="repo@sha256:abc"), "image:", "sha256"),
    ("both-trainer-and-command", job_with(command=["python", "x.py"]), "command", "exactly one"),
    ("neither", job_with(trainer=...), "trainer", "exactly one"),
    ("command-empty", {"name": "x", "command": []}, "command:", "non-empty"),
    ("command-not-list", {"name": "x", "command": "python x.py"}, "command:", "list"),
    ("nodes-zero", job_with(resources={"nodes": 0}), "resources.nodes:", "greater than or equal to 1"),
    ("nodes-text", job_with(resources={"nodes": "two"}), "resources.nodes:", "integer"),
    ("gpus-too-many", job_with(resources={"gpus_per_node": 17}), "resources.gpus_per_node:", "16"),
    (
        "procs-over-gpus",
        job_with(resources={"gpus_per_node": 2, "procs_per_node": 4}),
        "procs_per_node",
        "gpus_per_node",
    ),
    (
        "elastic-range",
        job_with(resources={"nodes": 1, "elastic": {"min_nodes": 2, "max_nodes": 4}}),
        "elastic",
        "min_nodes",
    ),
    (
        "elastic-missing-max",
        job_with(resources={"elastic": {"min_nodes": 1}}),
        "resources.elastic.max_nodes:",
        "required",
    ),
    ("memory", job_with(resources={"memory": "lots"}), "resources.memory:", "16Gi"),
    ("memory-tiny", job_with(resources={"memory": "10K"}), "resources.memory:", "1 MiB"),
    ("restarts", job_with(resources={"max_restarts": -1}), "resources.max_restarts:", "0"),
    ("resources-unknown", job_with(resources={"node": 2}), "resources.node:", 'did you mean "nodes"'),
    ("top-unknown", job_with(resource={"nodes": 2}), "resource:", 'did you mean "resources"'),
    ("top-unknown-far", job_with(colour="blue"), "colour:", "known fields here"),
    ("data-name", job_with(data={"Train": "x"}), "data:", "'Train'"),
    ("data-scheme", job_with(data={"train": "ftp://host/x"}), "data:", "s3://"),
    ("data-empty", job_with(data={"train": " "}), "data:", "empty"),
    ("no-train-data", job_with(data={"val": "v.jsonl"}), "train_data", "'train'"),
    ("env-name", job_with(env={"1BAD": "v"}), "env:", "environment variable"),
    ("env-reserved", job_with(env={"RANK": "0"}), "env:", "RANK"),
    ("env-value-type", job_with(env={"A": {"b": 1}}), "env.A:", "string"),
    ("secret-env", job_with(secrets=[{"env": "bad name", "name": "s"}]), "secrets[0].env:", "letters"),
    ("secret-name", job_with(secrets=[{"env": "TOKEN", "name": "has space"}]), "secrets[0].name:", "no spaces"),
    ("secret-missing-name", job_with(secrets=[{"env": "TOKEN"}]), "secrets[0].name:", "required"),
    (
        "secret-value-field",
        job_with(secrets=[{"env": "T", "name": "n", "value": "hunter2"}]),
        "secrets[0].value:",
        "unknown",
    ),
    ("secret-dup", job_with(secrets=[{"env": "T", "name": "a"}, {"env": "T", "name": "b"}]), "secret env", "unique"),
    (
        "secret-env-clash",
        job_with(env={"T": "x"}, secrets=[{"env": "T", "name": "a"}]),
        "secret env",
        "not also in env",
    ),
    ("runtime-text", job_with(max_runtime="forever"), "max_runtime:", "4h"),
    ("runtime-zero", job_with(max_runtime=0), "max_runtime:", "positive"),
    ("retries", job_with(retries=-1), "retries:", "0"),
    ("spot", job_with(spot="maybe"), "spot:", "boolean"),
    ("batch", job_with(trainer__batch_size=0), "trainer.batch_size:", "1"),
    ("optimizer", job_with(trainer__optimizer="adam"), "trainer.optimizer:", "'adamw'"),
    ("model", job_with(trainer__model="Bad Model"), "trainer.model:", "package.module:build_fn"),
    ("lr", job_with(trainer__lr=0), "trainer.lr:", "greater than 0"),
    ("trainer-unknown", job_with(trainer__epoch=3), "trainer.epoch:", 'did you mean "epochs"'),
    (
        "global-batch",
        job_with(resources={"procs_per_node": 2}, trainer__global_batch_size=3),
        "trainer.global_batch_size",
        "multiple",
    ),
    (
        "global-batch-small",
        job_with(resources={"procs_per_node": 4}, trainer__global_batch_size=2),
        "trainer.global_batch_size",
        "world size",
    ),
    ("nccl-no-gpu", job_with(trainer__backend="nccl"), "trainer.backend", "GPUs"),
    ("fp16-no-gpu", job_with(trainer__precision="fp16"), "trainer.precision", "GPUs"),
    ("checkpoint-every", job_with(checkpoint={"every_steps": 0}), "checkpoint.every_steps:", "1"),
    ("checkpoint-keep", job_with(checkpoint={"keep": 0}), "checkpoint.keep:", "1"),
    ("slurm-container", job_with(slurm={"container": "docker"}), "slurm.container:", "'pyxis'"),
    ("k8s-policy", job_with(kubernetes={"clean_pod_policy": "Sometimes"}), "kubernetes.clean_pod_policy:", "'All'"),
    ("local-unknown", job_with(local={"pyhton": "python3"}), "local.pyhton:", 'did you mean "python"'),
    ("sagemaker-volume", job_with(sagemaker={"volume_size_gb": 0}), "sagemaker.volume_size_gb:", "1"),
    ("section-not-mapping", job_with(resources=[1, 2]), "resources:", "dictionary"),
]


@pytest.mark.parametrize(("data", "field", "accepted"), [c[1:] for c in INVALID], ids=[c[0] for c in INVALID])
def test_invalid_job_names_field_and_what_is_accepted(data: dict[str, Any], field: str, accepted: str) -> None:
    found = problems(data)
    assert any(field in p and accepted in p for p in found), found


def test_all_problems_are_reported_at_once() -> None:
    found = problems(job_with(name="Bad", resources={"nodes": 0}, retries=-2))
    assert {p.split(":")[0] for p in found} >= {"name", "resources.nodes", "retries"}


def test_error_shows_the_bad_value() -> None:
    assert any("got 'adam'" in p for p in problems(job_with(trainer__optimizer="adam")))


@pytest.mark.parametrize("data", [["a", "b"], "name: x", 3, None])
def test_a_job_must_be_a_mapping(data: Any) -> None:
    assert "mapping" in problems(data)[0]


# ---------------------------------------------------------------- YAML, overrides, targets


def test_yaml_syntax_error_names_line_and_column() -> None:
    with pytest.raises(JobError) as info:
        Job.from_yaml_text("name: x\ntrainer: [unclosed\n", "bad.yaml")
    assert "line" in str(info.value) and "column" in str(info.value) and "bad.yaml" in str(info.value)


def test_empty_and_missing_files(tmp_path: Path) -> None:
    (tmp_path / "empty.yaml").write_text("")
    with pytest.raises(JobError, match="empty"):
        Job.from_yaml(tmp_path / "empty.yaml")
    with pytest.raises(JobError, match="no such file"):
        Job.from_yaml(tmp_path / "missing.yaml")
    (tmp_path / "bin.yaml").write_bytes(b"name: \x00\x01")
    with pytest.raises(JobError, match="binary"):
        Job.from_yaml(tmp_path / "bin.yaml")


def test_yaml_alias_bomb_is_refused() -> None:
    text = 'a: &a ["x"]\n' + "".join(f"{c}: &{c} [*{p}, *{p}]\n" for p, c in zip("abcdefgh", "bcdefghi", strict=True))
    text += "name: x\ncommand: [python]\n"
    with pytest.raises(JobError):
        Job.from_yaml_text("\n".join(["n: " + "[" * 40 + "]" * 40]), "deep.yaml")
    # wide aliases load (bounded), but the unknown fields are still named
    with pytest.raises(JobError, match="a: unknown field"):
        Job.from_yaml_text(text, "alias.yaml")


def test_overrides_parse_yaml_values_and_revalidate() -> None:
    job = Job.parse(BASE)
    changed = job.with_overrides(["trainer.epochs=3", "resources.procs_per_node=2", "env.MODE=fast", "spot=true"])
    assert changed.trainer is not None and changed.trainer.epochs == 3
    assert changed.resources.nprocs == 2 and changed.env == {"MODE": "fast"} and changed.spot is True
    with pytest.raises(JobError, match=r"trainer\.epochs"):
        job.with_overrides(["trainer.epochs=0"])
    with pytest.raises(JobError, match=r"key\.path=value"):
        job.with_overrides(["trainer.epochs"])
    with pytest.raises(JobError, match="name is not a section"):
        job.with_overrides(["name.first=x"])


def test_target_sections_are_required_only_when_submitting() -> None:
    job = Job.parse(BASE)
    job.check_target("local")
    with pytest.raises(JobError) as info:
        job.check_target("sagemaker")
    assert any(p.startswith("sagemaker.role_arn:") for p in info.value.problems)
    with pytest.raises(JobError, match='did you mean "slurm"'):
        get_target("slurmm")
    with pytest.raises(JobError, match="target"):
        job.section("cloud")


def test_a_secret_value_put_in_the_job_file_is_refused_without_echoing_it() -> None:
    found = problems(job_with(secrets=[{"env": "T", "name": "n", "value": "hunter2"}]))
    assert found and not any("hunter2" in p for p in found)


# ---------------------------------------------------------------- strict scalars: no silent coercion

STRICT: list[tuple[dict[str, Any], str]] = [
    # a value of another type that lax validation used to turn into this field's type
    (job_with(resources={"nodes": True}), "resources.nodes: got True (bool); expected an integer"),
    (job_with(resources={"nodes": "2"}), "resources.nodes: got '2' (str); expected an integer"),
    (job_with(resources={"nodes": 2.0}), "resources.nodes: got 2.0 (float); expected an integer"),
    (job_with(trainer={"epochs": False}), "trainer.epochs: got False (bool); expected an integer"),
    (job_with(trainer={"lr": "0.01"}), "trainer.lr: got '0.01' (str); expected a number"),
    (job_with(trainer={"streaming": "true"}), "trainer.streaming: got 'true' (str); expected a boolean"),
    (job_with(spot=1), "spot: got 1 (int); expected a boolean"),
    (job_with(max_runtime=True), "max_runtime: got True (bool); expected a string or an integer"),
    (job_with(checkpoint={"every_steps": "100"}), "checkpoint.every_steps: got '100' (str); expected an integer"),
    (job_with(retries="1"), "retries: got '1' (str); expected an integer"),
    (job_with(kubernetes={"use_master": "yes"}), "kubernetes.use_master: got 'yes' (str); expected a boolean"),
]


@pytest.mark.parametrize(("data", "message"), STRICT, ids=[m.partition(":")[0] for _, m in STRICT])
def test_a_scalar_takes_only_its_own_type(data: dict[str, Any], message: str) -> None:
    assert any(p.startswith(message) for p in problems(data)), problems(data)


def test_yaml_and_the_command_line_give_real_types(tmp_path: Path) -> None:
    """What a person writes still works: YAML's own types, `--set` read as YAML, units as strings."""
    path = tmp_path / "job.yaml"
    path.write_text(
        "name: typed\ntrainer: {lr: 1e-3, epochs: 2, streaming: true}\ndata: {train: d.jsonl}\n"
        "resources: {nodes: 2, memory: 16Gi}\nmax_runtime: 2h\nspot: false\n"
    )
    job = Job.from_yaml(path)
    assert job.trainer is not None and job.trainer.lr == 0.001 and job.trainer.epochs == 2
    assert job.resources.memory_mib == 16 * 1024 and job.max_runtime_seconds == 7200
    changed = job.with_overrides(["resources.nodes=3", "trainer.lr=3e-4", "spot=true", "max_runtime=90"])
    assert changed.resources.nodes == 3 and changed.trainer is not None and changed.trainer.lr == 0.0003
    assert changed.spot is True and changed.max_runtime_seconds == 90
    with pytest.raises(JobError, match=r"resources\.nodes: got '3' \(str\); expected an integer"):
        job.with_overrides(["resources.nodes='3'"])


def test_to_yaml_round_trips_strings_that_look_like_yaml_12_numbers() -> None:
    """`1e3` is a number to the loader (YAML 1.2), so the string "1e3" is written quoted."""
    job = Job.parse(job_with(env={"A": "1e3", "B": "2E-4", "C": "true"}, command=["run", "1e3"], trainer=...))
    assert Job.from_yaml_text(job.to_yaml()) == job


# ---------------------------------------------------------------- env values and names (issue 27 findings 6, 10)


def test_env_numbers_become_their_text_as_docker_compose_reads_them(tmp_path: Path) -> None:
    path = tmp_path / "job.yaml"
    path.write_text("name: e\ncommand: [python, t.py]\nenv: {SEED: 3, LR: 1e-3, RATIO: 0.5, NAME: x}\n")
    job = Job.from_yaml(path)
    assert job.env == {"SEED": "3", "LR": "0.001", "RATIO": "0.5", "NAME": "x"}
    assert Job.from_yaml(path, ["env.SEED=4"]).env["SEED"] == "4"  # `--set env.SEED=4` as the CLI gives it


@pytest.mark.parametrize(("raw", "word"), [("true", "true"), ("off", "false"), ("", "")])
def test_an_env_boolean_or_empty_value_is_refused_with_the_quoting(tmp_path: Path, raw: str, word: str) -> None:
    path = tmp_path / "job.yaml"
    path.write_text(f"name: e\ncommand: [python, t.py]\nenv:\n  DEBUG: {raw}\n")
    with pytest.raises(JobError) as info:
        Job.from_yaml(path)
    (problem,) = info.value.problems
    assert problem.startswith("env.DEBUG: got ")
    assert f"DEBUG: '{word}' in YAML" in problem and f"--set \"env.DEBUG='{word}'\"" in problem
    assert f'"{word}" in Python' in problem
    path.write_text(f"name: e\ncommand: [python, t.py]\nenv:\n  DEBUG: '{word}'\n")  # quoted as it says: accepted
    assert Job.from_yaml(path).env == {"DEBUG": word}


def test_a_bad_name_gets_every_rule_it_breaks_in_one_message_and_a_name_that_keeps_them() -> None:
    (problem,) = problems(job_with(name="9Bad_Name-"))
    for broken in ("capitals", "does not start with a letter", "other than a-z, 0-9 and '-'", "ends with '-'"):
        assert broken in problem, problem
    assert "try 'job-9bad-name'" in problem
    assert Job.parse(job_with(name="job-9bad-name")).name == "job-9bad-name"
    (problem,) = problems(job_with(name="Caps"))
    assert (
        problem.startswith("name: got 'Caps'; it has capitals: a job name has at most 63") and "try 'caps'" in problem
    )


def test_the_reference_says_every_name_rule() -> None:
    text = (Path(__file__).parents[2] / "docs" / "job-reference.md").read_text()
    row = next(line for line in text.splitlines() if line.startswith("| `name` |"))
    assert "starts with a letter" in row and "At most 63" in row and "end with '-'" in row

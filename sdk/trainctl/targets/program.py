"""How every target says "run the trainer": the launcher argv and the trainer's flags (docs/contracts.md)."""

from __future__ import annotations

import json
import posixpath
import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from ..spec.job_spec import JobSpec

LAUNCHER = ("trainer-launch",)


CHECKPOINT_FLAGS = {
    "checkpoint_every": "every_steps",
    "keep_checkpoints": "keep",
    "resume": "resume",
    "checkpoint_async": "async_",
}
"""Trainer fields that come from the job's `checkpoint:` section (trainer field -> its name there)."""

OMITTED_AT = {"resume": "auto", "checkpoint_async": False}
"""Checkpoint flags left out of the artifact at these values (the trainer's defaults)."""

TARGET_FLAGS = ("checkpoint_dir", "output_dir")
"""Trainer fields each target fills with its own locations (a PVC path, /opt/ml/..., the run folder)."""


def flag_text(value: Any) -> str:
    """The trainer's flag/hyperparameter text form: true/false, compact JSON with sorted keys for
    dicts and lists, else str. A copy of `trainer.config.flag_text` (the SDK never imports the
    trainer); tests/test_trainer_contract.py checks the two agree."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, dict | list):
        return json.dumps(value, sort_keys=True, separators=(",", ":"))
    return str(value)


def trainer_settings(
    job: JobSpec,
    *,
    data_paths: Mapping[str, str],
    checkpoint_dir: str | None,
    output_dir: str | None,
) -> dict[str, str]:
    """The trainer config as field -> text, with the target's own paths for data, checkpoints and output.

    Only values that differ from the trainer's defaults are written, so artifacts stay readable
    (the checkpoint cadence and retention are always written: they say what a resume finds).
    """
    assert job.trainer is not None, "only trainer jobs have trainer settings"
    cfg = job.trainer.model_dump(mode="json", exclude_defaults=True, exclude={"train_data", "val_data"})
    train = job.trainer.train_data or data_paths.get("train")
    val = job.trainer.val_data or data_paths.get("val")
    settings: dict[str, Any] = {"model": job.trainer.model, **cfg}
    if train:
        settings["train_data"] = train
    if val:
        settings["val_data"] = val
    if checkpoint_dir:
        settings["checkpoint_dir"] = checkpoint_dir
    for flag, name in CHECKPOINT_FLAGS.items():
        value = getattr(job.checkpoint, name)
        if flag not in OMITTED_AT or value != OMITTED_AT[flag]:
            settings[flag] = value
    if output_dir:
        settings["output_dir"] = output_dir
    return {key: flag_text(value) for key, value in settings.items()}


def as_flags(settings: Mapping[str, str]) -> list[str]:
    """`{"batch_size": "32"}` -> `["--batch-size", "32"]` in a stable order."""
    flags: list[str] = []
    for key, value in settings.items():
        flags += [f"--{key.replace('_', '-')}", value]
    return flags


def script_index(command: Sequence[str]) -> int | None:
    """Which word of a `command:` names its program's file, read relative to the working folder: the
    first one when it is a relative path (`./run.sh`, `bin/train`), or the script after `python`/`python3`
    (`python train.py`; not `python -m pkg` or `python -c ...`). None when no word does."""
    if not command:
        return None
    if re.fullmatch(r"python(3(\.\d+)?)?", posixpath.basename(command[0])):
        script = command[1] if len(command) > 1 else ""
        return 1 if script and not script.startswith("-") and not posixpath.isabs(script) else None
    head = command[0]
    return 0 if "/" in head and not posixpath.isabs(head) and "$" not in head else None


def program_argv(
    job: JobSpec,
    *,
    python: str = "python",
    data_paths: Mapping[str, str],
    checkpoint_dir: str | None,
    output_dir: str | None,
    script_from: Callable[[str], str] | None = None,
) -> list[str]:
    """What runs on every process: the user's command, or the built-in trainer with its flags.

    `script_from`: where a `command:` job's program file is read from (`script_index`), where the target
    can see the job file's folder and no code bundle brings the program into the working folder."""
    if job.command is not None:
        command = list(job.command)
        at = script_index(command)
        if script_from is not None and at is not None and job.code_spec is None:
            command[at] = script_from(command[at])
        return command
    settings = trainer_settings(job, data_paths=data_paths, checkpoint_dir=checkpoint_dir, output_dir=output_dir)
    return [python, "-m", "trainer.train", *as_flags(settings)]


def launcher_options(job: JobSpec, mode: str | None = None) -> list[str]:
    """The launcher's options: how it starts the processes (`--launch`: `mode`, a target's own such as SLURM's
    srun, else the job's `launch:`; left out for torchrun), the job's process and restart counts, elastic node range
    and a `command:` job's hang rule (docs/contracts.md section 1)."""
    res = job.resources
    launch = mode or job.launch
    argv = ["--launch", launch] if launch != "torchrun" else []
    argv += ["--nproc-per-node", str(res.nprocs), "--max-restarts", str(res.max_restarts)]
    if res.elastic is not None:
        argv += ["--nnodes", f"{res.elastic.min_nodes}:{res.elastic.max_nodes}"]
    if job.hang is not None:
        argv += job.hang.launcher_flags()
    return argv


def launcher_argv(
    job: JobSpec, program: Sequence[str], launcher: Sequence[str] = LAUNCHER, mode: str | None = None
) -> list[str]:
    """The launcher with its options, then the program (started once per node, or per task: `launcher_options`);
    with `output_dir: s3://...`, `--output-s3`: node 0's launcher uploads the output folder after each attempt."""
    upload = ["--output-s3", uri] if (uri := s3_output(job)) else []
    return [*launcher, *launcher_options(job, mode), *upload, "--", *program]


def s3_output(job: JobSpec) -> str | None:
    """The job's `output_dir` where it is an `s3://` prefix (docs/data.md, outputs), else None."""
    return job.output_dir if job.output_dir and job.output_dir.startswith("s3://") else None


def s3_output_dest(job: JobSpec) -> str | None:
    """Where a run's output folder lands, `<prefix>/<run uid>/` (the trainer's output_upload.destination), where
    the job names an `s3://` output_dir and has its uid (at submit); else None."""
    uri = s3_output(job)
    if uri is None or job.run_identity is None:
        return None
    return f"{uri.rstrip('/')}/{job.run_identity.uid}/"


CHECKPOINT_S3_ENV = "TRAINER_CHECKPOINT_S3"
"""The built-in trainer mirrors each published checkpoint to this prefix (trainer/checkpoint/s3.py)."""


def s3_checkpoint(job: JobSpec) -> str | None:
    """The job's `checkpoint.dir` where it is an `s3://` prefix, else None."""
    found = job.checkpoint.dir
    return found if found and found.startswith("s3://") else None


def s3_checkpoint_env(job: JobSpec) -> dict[str, str]:
    """`TRAINER_CHECKPOINT_S3` for a trainer job whose checkpoint.dir is s3:// (local, SLURM, Kubernetes)."""
    uri = s3_checkpoint(job)
    return {CHECKPOINT_S3_ENV: uri} if uri else {}


def s3_checkpoint_problems(job: JobSpec) -> list[str]:
    """An s3:// checkpoint.dir is mirrored by the built-in trainer; a `command:` program's checkpoints are its own."""
    uri = s3_checkpoint(job)
    if uri is None:
        return []
    if not uri.removeprefix("s3://").partition("/")[0]:
        return [f"checkpoint.dir: got {uri!r}; expected s3://bucket/prefix"]
    if job.trainer is None:
        return [
            f"checkpoint.dir: {uri}: the built-in trainer mirrors its checkpoints to S3; a command: program writes "
            "its own (TRAINER_CHECKPOINT_DIR is a folder): give a local or shared checkpoint.dir"
        ]
    return []


def s3_output_problems(job: JobSpec, mode: str | None, container: str | None) -> list[str]:
    """Problems with an `s3://` output_dir on a target whose launcher uploads it: the upload runs in the launcher
    after the attempt, so the launcher must outlive the program (torchrun, not `--launch srun`/`per_node`, which
    become the program), and see the credentials (`container`: a SLURM podman container does not yet)."""
    uri = s3_output(job)
    if uri is None:
        return []
    found = []
    if not uri.removeprefix("s3://").partition("/")[0]:
        found.append(f"output_dir: got {uri!r}; expected s3://bucket/prefix")
    if (mode or job.launch) != "torchrun":
        found.append(
            f"output_dir: {uri}: the launcher uploads the output after the attempt, and with launch "
            f"{mode or job.launch} it becomes the program; use launch: torchrun, or a local or shared output_dir"
        )
    if container:
        found.append(
            f"output_dir: {uri}: an s3:// output is uploaded by a run of processes, not yet from a {container} "
            "container; give a local or shared output_dir"
        )
    return found


def output_notes(job: JobSpec) -> list[str]:
    """What render says of an `s3://` output_dir and checkpoint.dir."""
    notes = []
    if ckpt := s3_checkpoint(job):
        notes.append(
            f"checkpoint.dir: {ckpt}: checkpoints are written in the run's folder, and rank 0 uploads each published "
            f"one to {ckpt.rstrip('/')}/step-*/ in the background; resume fetches the newest there when it is newer"
        )
    uri = s3_output(job)
    if uri is None:
        return notes
    notes.append(
        f"output_dir: {uri}: the output folder is written in the run's folder, and node 0's launcher uploads it to "
        f"{uri.rstrip('/')}/<run uid>/ at the end of each attempt (each file verified, then _complete)"
    )
    return notes


def data_env(data_paths: Mapping[str, str]) -> dict[str, str]:
    """`TRAINER_DATA_<NAME>` for every input, so a user's command finds its data on any target."""
    return {f"TRAINER_DATA_{name.upper().replace('-', '_')}": path for name, path in sorted(data_paths.items())}


def s3_data(job: JobSpec) -> dict[str, str]:
    """Every `s3://` data input, staged or streamed, {name: uri}: what submit checks is there."""
    return {name: uri for name, uri in sorted(job.data.items()) if uri.startswith("s3://")}


def s3_inputs(job: JobSpec) -> dict[str, str]:
    """The job's staged `s3://` data inputs, {name: uri}: the launcher stages them (`--data-cache`, docs/data.md)."""
    return {name: uri for name, uri in s3_data(job).items() if name not in job.data_stream}


def uses_s3(job: JobSpec) -> bool:
    """Whether the run reads or writes S3 itself: `s3://` data, output_dir or checkpoint.dir."""
    return bool(s3_data(job) or s3_output(job) or s3_checkpoint(job))


def stream_env(job: JobSpec) -> dict[str, str]:
    """`TRAINER_STREAM_DATA`: the inputs the launcher leaves as URIs for the ranks to stream (docs/data.md)."""
    return {"TRAINER_STREAM_DATA": ",".join(sorted(job.data_stream))} if job.data_stream else {}


def streaming_notes(job: JobSpec) -> list[str]:
    """What render says of each streamed input: no copy, each rank reads its share from S3."""
    return [
        f"data.{name}: {job.data[name]} is streamed: each rank reads its ~1/N share straight from S3 with ranged "
        "GETs through a bounded buffer (no copy); a command finds the URI in TRAINER_DATA_<NAME>"
        for name in sorted(job.data_stream)
    ]


def s3_trainer_paths(job: JobSpec) -> list[str]:
    """Problems: a `trainer.train_data`/`val_data` given as an s3:// URI (only `data:` inputs are staged)."""
    if job.trainer is None:
        return []
    return [
        f"trainer.{key}: got {value!r}; name an s3:// input under `data:` ({'train' if key == 'train_data' else 'val'}"
        ": ...), which every target stages or reads"
        for key in ("train_data", "val_data")
        if (value := getattr(job.trainer, key)) and value.startswith("s3://")
    ]


def staging_notes(job: JobSpec, cache: str, by: str) -> list[str]:
    """What render says of each `s3://` input: where the run reads it from."""
    return [
        f"data.{name}: {uri} is staged {by} into {cache}/<identity>/ before training (a verified copy, fetched "
        "once per object version and shared by every run that names it); the program reads that copy"
        for name, uri in s3_inputs(job).items()
    ]

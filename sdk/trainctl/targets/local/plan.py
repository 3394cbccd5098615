"""The local run's plan (pure): the launcher's argv, environment and working directory, typed like SLURM's
`SlurmPlan`. render.py prints it as a script, engine.py runs it, inputs.py checks what it reads on this machine.

The run's folder appears as `${TRAINCTL_RUN_DIR}` (and secret files under `${TRAINCTL_SECRETS_DIR}`);
the engine substitutes them when it starts the run.
"""

from __future__ import annotations

import os
import sys
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ...runs.provenance import ENV as PROVENANCE_ENV
from ...runs.provenance import provenance_env
from ...submit.bundle import BUNDLE_NAME, launcher_env, prepared
from ..program import (
    data_env,
    launcher_argv,
    program_argv,
    s3_checkpoint,
    s3_checkpoint_env,
    s3_inputs,
    s3_output,
    stream_env,
    uses_s3,
)
from . import container_argv as ctr
from .refusals import refuse
from .section import LocalSection

if TYPE_CHECKING:
    from ...spec.job_spec import JobSpec
    from ...submit.bundle import Bundle

RUN_DIR = "${TRAINCTL_RUN_DIR}"
WORK_DIR = f"{RUN_DIR}/work"
"""The run's working folder: the program's relative writes land there (a code bundle is unpacked into it)."""
SECRETS_DIR = "${TRAINCTL_SECRETS_DIR}"
DATA_CACHE = f"{RUN_DIR}/../../data-cache"
"""Where s3:// inputs are staged: `$TRAINCTL_HOME/data-cache`, beside `runs/` (shared by every local run)."""
CONTAINER_DATA_CACHE = f"{RUN_DIR}/../../data-cache-container"
"""A container's own cache (the image's user 10001 owns it), shared by every `local.container` run: the process
runs' cache stays their user's."""


_NATIVE_KEYS = (  # Rendered.native: the keys render always gave, in their order
    "argv",
    "env",
    "cwd",
    "secret_files",
    "max_runtime_s",
    "retries",
    "output_dir",
    "checkpoint_dir",
    "code",
)


@dataclass(frozen=True)
class CodePlan:
    """A `code:` job's bundle: where submit writes it in the run's folder, and the sha256 the launcher checks."""

    sha256: str
    source: str
    bundle: str


@dataclass(frozen=True)
class ContainerPlan:
    """`local.container`: the runtime, the image and its read-only mounts (host path -> container path)."""

    runtime: str
    image: str
    mounts: dict[str, str]
    code_work: str | None = None
    """A `code:` job's writable code/ folder in the run's (the launcher's unpacked copy and venvs); None without."""
    data_cache: str | None = None
    """With `s3://` inputs, the host folder the launcher stages them into (CONTAINER_DATA_CACHE); None without."""

    def to_dict(self) -> dict[str, Any]:
        found: dict[str, Any] = {"runtime": self.runtime, "image": self.image, "mounts": self.mounts}
        found |= {"code_work": self.code_work} if self.code_work else {}
        return found | ({"data_cache": self.data_cache} if self.data_cache else {})

    def writable(self) -> list[str]:
        """The host folders besides the output, checkpoint and work ones that the image's user must own."""
        return [folder for folder in (self.code_work, self.data_cache) if folder]


@dataclass(frozen=True)
class LocalPlan:
    """Everything the local run needs. `to_dict` is the run's spec.json (the supervisor reads it), `native` the
    Rendered.native: both keep the keys and order they always had, so goldens and run folders stay the same."""

    argv: list[str]
    container: ContainerPlan | None
    cwd: str
    env: dict[str, str]
    secret_files: dict[str, str]
    max_runtime_s: int | None
    retries: int
    retry_on: list[str]
    data: dict[str, str]
    output_dir: str
    checkpoint_dir: str
    provenance: str
    code: CodePlan | None

    def to_dict(self) -> dict[str, Any]:
        found = {name: getattr(self, name) for name in self.__dataclass_fields__}
        found["container"] = self.container.to_dict() if self.container else None
        found["code"] = asdict(self.code) if self.code else None
        return found

    def native(self) -> dict[str, Any]:
        """What `trainctl render --output json` shows: retry_on only with retries, the container only with one."""
        plan = self.to_dict()
        native = {k: plan[k] for k in _NATIVE_KEYS}
        if self.retries:
            native["retry_on"] = plan["retry_on"]
        if self.container:
            native["container"] = plan["container"]
        return native


@dataclass(frozen=True)
class _Paths:
    """The run's paths from one side: this machine's (`_host_paths`), or the container's mounts of them
    (`_in_container`, whose `mounts` maps each host path to where the container sees it)."""

    data: dict[str, str]
    output_dir: str
    checkpoint_dir: str
    python: str
    """What runs a `python` command: local.python (default: ours) here, the image's `python` in a container."""
    trainer: dict[str, str]
    mounts: dict[str, str]


def local_path(value: str, base: Path) -> str:
    """A job path as the local machine reads it: relative to the job file's folder, `~` expanded."""
    if value.startswith("file://"):
        value = value[len("file://") :]
    if value.startswith("s3://"):
        return value  # staged by the launcher (--data-cache)
    if "$" in value or os.path.isabs(value):
        return value
    if value.startswith("~"):
        return os.path.expanduser(value)
    return os.path.normpath(os.path.join(base, value))


def plan_of(job: JobSpec) -> LocalPlan:
    """Everything the local run needs, typed (render prints it, the engine runs it)."""
    refuse(job)
    section = job.section_as("local", LocalSection)
    runtime, base = section.container, job.base_dir or Path.cwd()
    host = _host_paths(job, base, section.python or sys.executable)
    seen = _in_container(host) if runtime else host
    written = job  # provenance hashes the job as written, not its paths resolved on this machine
    if seen.trainer and job.trainer is not None:
        job = job.model_copy(update={"trainer": job.trainer.model_copy(update=seen.trainer)})
    code = prepared(job)
    program = _program(job, seen, None if runtime or section.workdir else base, contained=bool(runtime))
    argv = _launcher(job, program, runtime, host.python)
    code_env, code_mounts, code_work = _code(code, runtime)
    env = {**_env(job, seen), **code_env}
    ran = job.image if runtime else f"none (local python {host.python})"
    env.update(provenance_env(written, code.sha256 if code else None, image=ran))
    cwd = WORK_DIR if code is not None and not runtime else _workdir(section, base)
    secret_files = _secret_files(job)
    container = None
    if runtime:
        cache = CONTAINER_DATA_CACHE if s3_inputs(job) else None
        container = ContainerPlan(runtime, job.image, {**seen.mounts, **code_mounts}, code_work, cache)
        aws = ctr.AWS_ENV if uses_s3(job) else ()
        argv = _contained(container, argv, host, cwd, sorted({*env, *secret_files, *aws}))
    return LocalPlan(
        argv=argv, container=container, cwd=cwd, env=dict(sorted(env.items())), secret_files=secret_files,
        max_runtime_s=job.max_runtime_seconds, retries=job.retries, retry_on=[c.value for c in job.retry_on],
        data=host.data, output_dir=host.output_dir, checkpoint_dir=host.checkpoint_dir, provenance=env[PROVENANCE_ENV],
        code=CodePlan(code.sha256, str(code.source), f"{RUN_DIR}/{BUNDLE_NAME}") if code else None,
    )  # fmt: skip


def _host_paths(job: JobSpec, base: Path, python: str) -> _Paths:
    """The run's paths on this machine: the job's, resolved from its file's folder, else the run folder's own."""
    data = {name: local_path(uri, base) for name, uri in sorted(job.data.items())}
    # an s3:// output_dir: written in the run's folder, uploaded by the launcher (--output-s3)
    output_dir = local_path(job.output_dir, base) if job.output_dir and not s3_output(job) else f"{RUN_DIR}/output"
    given_ckpt = job.checkpoint.dir if not s3_checkpoint(job) else None  # s3://: mirrored by the trainer
    checkpoint_dir = local_path(given_ckpt, base) if given_ckpt else f"{RUN_DIR}/checkpoints"
    trainer: dict[str, str] = {}
    if job.trainer is not None:
        trainer = {
            key: local_path(value, base)
            for key in ("train_data", "val_data")
            if (value := getattr(job.trainer, key)) is not None
        }
    return _Paths(data, output_dir, checkpoint_dir, python, trainer, mounts={})


def _in_container(host: _Paths) -> _Paths:
    """In the container every path is the mount's: data under /data, output and checkpoints under /workspace."""
    mounts = ctr.data_mounts(host.data, host.trainer)
    data = {name: mounts.get(path, path) for name, path in host.data.items()}  # an s3:// URI stays one
    trainer = {key: mounts[path] for key, path in host.trainer.items()}
    return _Paths(data, ctr.OUTPUT_DIR, ctr.CHECKPOINT_DIR, "python", trainer, mounts)


def _workdir(section: LocalSection, base: Path) -> str:
    """Where the program runs: the run's own work/, unless the user names a folder (local.workdir)."""
    return local_path(section.workdir, base) if section.workdir else WORK_DIR


def _program(job: JobSpec, seen: _Paths, script_base: Path | None, contained: bool) -> list[str]:
    """The program's argv, with this machine's interpreter. `script_base`: a command's script is beside the job
    file, as its data paths are, when it runs in the run's work/ (None: a local.workdir is the user's, relative
    words stay relative to it; a container sees only its mounts)."""
    script_from = None if script_base is None else (lambda word: local_path(word, script_base))
    program = program_argv(
        job, python=seen.python, data_paths=seen.data, checkpoint_dir=seen.checkpoint_dir,
        output_dir=seen.output_dir, script_from=script_from,
    )  # fmt: skip
    if job.command is not None and program[0] in ("python", "python3"):
        # In the image `python` is the trainer's interpreter; here that is local.python (default: ours).
        program[0] = seen.python
    elif job.command is not None and program[0] == "torchrun" and not contained:
        program[:1] = [seen.python, "-m", "torch.distributed.run"]  # the image's torchrun: local.python's here
    return program


def _launcher(job: JobSpec, program: list[str], runtime: str | None, python: str) -> list[str]:
    """The launcher's argv around the program. --platform local: one node here even when trainctl runs inside a
    SLURM job, a pod or torchrun. In the image the launcher is the ENTRYPOINT (trainer-launch): the container's
    arguments are its options."""
    launcher = ["--platform", "local"] if runtime else [python, "-m", "trainer.launch", "--platform", "local"]
    if s3_inputs(job):
        launcher += ["--data-cache", ctr.DATA_CACHE if runtime else DATA_CACHE]
    return launcher_argv(job, program, launcher=launcher)


def _env(job: JobSpec, seen: _Paths) -> dict[str, str]:
    """The program's environment, before the code bundle's and the provenance's."""
    return {
        "OMP_NUM_THREADS": str(job.resources.cpus_per_proc),
        "PYTHONUNBUFFERED": "1",
        "TRAINER_CHECKPOINT_DIR": seen.checkpoint_dir,
        "TRAINER_OUTPUT_DIR": seen.output_dir,
        **data_env(seen.data),
        **stream_env(job),
        **s3_checkpoint_env(job),
        **({"TRAINCTL_GPUS_PER_NODE": str(job.resources.gpus_per_node)} if job.resources.gpus_per_node else {}),
        **job.process_env,
    }


def _code(code: Bundle | None, runtime: str | None) -> tuple[dict[str, str], dict[str, str], str | None]:
    """A `code:` job's launcher environment, its bundle's mount and its writable code/ folder (a container's)."""
    if code is None:
        return {}, {}, None
    if runtime:  # the bundle read-only; the run's code/ folder, writable by 10001, for the unpacked copy and venvs
        env = launcher_env(code, ctr.CODE_BUNDLE, ctr.CODE_DIR, ctr.VENV_CACHE)
        return env, {f"{RUN_DIR}/{BUNDLE_NAME}": ctr.CODE_BUNDLE}, f"{RUN_DIR}/code"
    # unpacked into the run's work/ by the launcher: edits during the run change nothing
    return launcher_env(code, f"{RUN_DIR}/{BUNDLE_NAME}", WORK_DIR, f"{RUN_DIR}/../../venvs"), {}, None


def _secret_files(job: JobSpec) -> dict[str, str]:
    """{env name: the file the run reads it from}: a secret's own path, else one under the secrets folder."""
    found = {}
    for secret in job.secrets:
        where = secret.name if os.path.isabs(secret.name) else f"{SECRETS_DIR}/{secret.name}"
        found[secret.env] = f"{where}/{secret.key}" if secret.key else where
    return dict(sorted(found.items()))


def _contained(container: ContainerPlan, argv: list[str], host: _Paths, cwd: str, names: list[str]) -> list[str]:
    """The runtime's `run` argv of the launcher's: the run's output, checkpoint and work folders writable."""
    writable = [(host.output_dir, ctr.OUTPUT_DIR), (host.checkpoint_dir, ctr.CHECKPOINT_DIR), (cwd, ctr.WORK_DIR)]
    writable += [(container.code_work, ctr.CODE_WORK)] if container.code_work else []
    writable += [(container.data_cache, ctr.DATA_CACHE)] if container.data_cache else []
    return ctr.run_argv(
        container.runtime, container.image, mounts_ro=container.mounts, mounts_rw=writable, env_names=names,
        launcher_argv=argv,
    )  # fmt: skip

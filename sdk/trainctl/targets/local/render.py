"""The local target's render (pure): the launcher's exact argv, environment and working directory.

The run's folder appears as `${TRAINCTL_RUN_DIR}` (and secret files under `${TRAINCTL_SECRETS_DIR}`);
the engine (engine.py) substitutes them when it starts the run.
"""

from __future__ import annotations

import os
import shlex
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ...bundle import BUNDLE_NAME, launcher_env, prepared
from ...errors import JobError
from ...provenance import ENV as PROVENANCE_ENV
from ...provenance import provenance_env
from ..base import Rendered
from ..program import (
    data_env,
    launcher_argv,
    output_notes,
    program_argv,
    s3_checkpoint,
    s3_checkpoint_env,
    s3_checkpoint_problems,
    s3_inputs,
    s3_output,
    s3_output_problems,
    s3_trainer_paths,
    staging_notes,
)
from . import container_argv as ctr
from .section import LocalSection

if TYPE_CHECKING:
    from ...spec import JobSpec

RUN_DIR = "${TRAINCTL_RUN_DIR}"
WORK_DIR = f"{RUN_DIR}/work"
"""The run's working folder: the program's relative writes land there (a code bundle is unpacked into it)."""
SECRETS_DIR = "${TRAINCTL_SECRETS_DIR}"
DATA_CACHE = f"{RUN_DIR}/../../data-cache"
"""Where s3:// inputs are staged: `$TRAINCTL_HOME/data-cache`, beside `runs/` (shared by every local run)."""
PLACEHOLDERS = (RUN_DIR, SECRETS_DIR, ctr.RUN_ID)


def _local_path(value: str, base: Path) -> str:
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


def plan_of(job: JobSpec) -> dict[str, Any]:
    """Everything the local run needs, as plain data (the Rendered.native)."""
    problems: list[str] = []
    if job.resources.nodes != 1:
        problems.append(
            f"resources.nodes: got {job.resources.nodes}; the local target runs on this one machine "
            "(use slurm, kubernetes or sagemaker for more nodes)"
        )
    for name, uri in job.data.items():
        if uri.startswith("pvc://"):
            problems.append(f"data.{name}: got {uri!r}; the local target reads local paths and s3:// only")
        elif uri.startswith("s3://") and job.section_as("local", LocalSection).container:
            problems.append(
                f"data.{name}: got {uri!r}; s3:// data is staged for a local run of processes, not yet with "
                "local.container (stage it with a run without local.container, or give a local path)"
            )
    problems += s3_trainer_paths(job)
    problems += s3_output_problems(job, None, job.section_as("local", LocalSection).container)
    problems += s3_checkpoint_problems(job)
    if problems:
        raise JobError(problems)

    written = job  # provenance hashes the job as written, not its paths resolved on this machine
    section = job.section_as("local", LocalSection)
    base = job.base_dir or Path.cwd()
    runtime, workdir = section.container, section.workdir
    python = section.python or sys.executable
    cwd = _local_path(workdir, base) if workdir else WORK_DIR  # the run's own, unless the user names one
    data_paths = {name: _local_path(uri, base) for name, uri in sorted(job.data.items())}
    # an s3:// output_dir: written in the run's folder, uploaded by the launcher (--output-s3)
    output_dir = _local_path(job.output_dir, base) if job.output_dir and not s3_output(job) else f"{RUN_DIR}/output"
    given_ckpt = job.checkpoint.dir if not s3_checkpoint(job) else None  # s3://: mirrored by the trainer
    checkpoint_dir = _local_path(given_ckpt, base) if given_ckpt else f"{RUN_DIR}/checkpoints"

    trainer_paths: dict[str, str] = {}
    if job.trainer is not None:
        trainer_paths = {
            key: _local_path(value, base)
            for key in ("train_data", "val_data")
            if (value := getattr(job.trainer, key)) is not None
        }
    mounts: dict[str, str] = {}
    if runtime:
        # In the container every path is the mount's: data under /data, output and checkpoints under /workspace.
        mounts = ctr.data_mounts(data_paths, trainer_paths)
        inside = {name: mounts[host] for name, host in data_paths.items()}
        trainer_inside = {key: mounts[host] for key, host in trainer_paths.items()}
        run_data, run_output, run_ckpt, run_python = inside, ctr.OUTPUT_DIR, ctr.CHECKPOINT_DIR, "python"
    else:
        trainer_inside = trainer_paths
        run_data, run_output, run_ckpt, run_python = data_paths, output_dir, checkpoint_dir, python
    if trainer_inside and job.trainer is not None:
        job = job.model_copy(update={"trainer": job.trainer.model_copy(update=trainer_inside)})
    # a command's script beside the job file, as its data paths are, when it runs in the run's work/ (a
    # local.workdir is the user's: relative words stay relative to it; a container sees only its mounts)
    script_from = None if runtime or workdir else (lambda word: _local_path(word, base))
    program = program_argv(
        job, python=run_python, data_paths=run_data, checkpoint_dir=run_ckpt, output_dir=run_output,
        script_from=script_from,
    )  # fmt: skip
    if job.command is not None and program[0] in ("python", "python3"):
        # In the image `python` is the trainer's interpreter; here that is local.python (default: ours).
        program[0] = run_python
    elif job.command is not None and program[0] == "torchrun" and not runtime:
        program[:1] = [run_python, "-m", "torch.distributed.run"]  # the image's torchrun: local.python's here
    # --platform local: one node here even when trainctl runs inside a SLURM job, a pod or torchrun.
    # In the image the launcher is the ENTRYPOINT (trainer-launch): the container's arguments are its options.
    launcher = ["--platform", "local"] if runtime else [python, "-m", "trainer.launch", "--platform", "local"]
    if s3_inputs(job):
        launcher += ["--data-cache", DATA_CACHE]
    argv = launcher_argv(job, program, launcher=launcher)

    env = {
        "OMP_NUM_THREADS": str(job.resources.cpus_per_proc),
        "PYTHONUNBUFFERED": "1",
        "TRAINER_CHECKPOINT_DIR": run_ckpt,
        "TRAINER_OUTPUT_DIR": run_output,
        **data_env(run_data),
        **s3_checkpoint_env(job),
        **({"TRAINCTL_GPUS_PER_NODE": str(job.resources.gpus_per_node)} if job.resources.gpus_per_node else {}),
        **job.process_env,
    }
    code = prepared(job)
    code_work: str | None = None
    if code is not None and runtime:
        # The bundle read-only; the run's code/ folder, writable by 10001, for the unpacked copy and venvs.
        code_work = f"{RUN_DIR}/code"
        mounts = {**mounts, f"{RUN_DIR}/{BUNDLE_NAME}": ctr.CODE_BUNDLE}
        env.update(launcher_env(code, ctr.CODE_BUNDLE, ctr.CODE_DIR, ctr.VENV_CACHE))
    elif code is not None:  # unpacked into the run's work/ by the launcher: edits during the run change nothing
        cwd = WORK_DIR
        env.update(launcher_env(code, f"{RUN_DIR}/{BUNDLE_NAME}", WORK_DIR, f"{RUN_DIR}/../../venvs"))
    ran = job.image if runtime else f"none (local python {python})"
    env.update(provenance_env(written, code.sha256 if code else None, image=ran))
    secret_files = {}
    for secret in job.secrets:
        where = secret.name if os.path.isabs(secret.name) else f"{SECRETS_DIR}/{secret.name}"
        secret_files[secret.env] = f"{where}/{secret.key}" if secret.key else where
    container: dict[str, Any] | None = None
    if runtime:
        names = sorted({*env, *secret_files})
        argv = ctr.run_argv(
            runtime,
            job.image,
            mounts_ro=mounts,
            mounts_rw=[(output_dir, ctr.OUTPUT_DIR), (checkpoint_dir, ctr.CHECKPOINT_DIR), (cwd, ctr.WORK_DIR)]
            + ([(code_work, ctr.CODE_WORK)] if code_work else []),
            env_names=names,
            launcher_argv=argv,
        )
        container = {"runtime": runtime, "image": job.image, "mounts": mounts}
        if code_work:
            container["code_work"] = code_work
    return {
        "argv": argv,
        "container": container,
        "cwd": cwd,
        "env": dict(sorted(env.items())),
        "secret_files": dict(sorted(secret_files.items())),
        "max_runtime_s": job.max_runtime_seconds,
        "retries": job.retries,
        "retry_on": [c.value for c in job.retry_on],
        "data": data_paths,
        "output_dir": output_dir,
        "checkpoint_dir": checkpoint_dir,
        "provenance": env[PROVENANCE_ENV],
        "code": {"sha256": code.sha256, "source": str(code.source), "bundle": f"{RUN_DIR}/{BUNDLE_NAME}"}
        if code
        else None,
    }


def _sh(word: str) -> str:
    """Shell-quote a word, leaving the ${TRAINCTL_*_DIR} placeholders expandable."""
    if not any(p in word for p in PLACEHOLDERS):
        return shlex.quote(word)
    out = ""
    rest = word
    while rest:
        hits = [(rest.find(p), p) for p in PLACEHOLDERS if p in rest]
        if not hits:
            out += _dq(rest)
            break
        at, placeholder = min(hits)
        out += _dq(rest[:at]) + placeholder
        rest = rest[at + len(placeholder) :]
    return f'"{out}"'


def _dq(text: str) -> str:
    for char in ("\\", '"', "$", "`"):
        text = text.replace(char, "\\" + char)
    return text


def _script(job: JobSpec, plan: dict[str, Any]) -> str:
    """The plan as a readable, runnable sh script (what `trainctl render --target local` prints)."""
    res = job.resources
    backend = "nccl" if res.gpus_per_node else "gloo"
    words = [*plan["argv"], plan["cwd"], *plan["env"].values()]
    literal_dollar = any("$" in w and not any(p in w for p in PLACEHOLDERS) for w in words)
    lines = [
        "#!/bin/sh",
        *(["# shellcheck disable=SC2016  # a literal $ in single quotes is meant"] if literal_dollar else []),
        f"# trainctl local run of job {job.name!r}: 1 node x {res.nprocs} process(es), {backend} backend.",
        "# `trainctl submit --target local` runs this in a detached process group with",
        "# TRAINCTL_RUN_DIR set to the run's folder ($TRAINCTL_HOME/runs/<id>) and the log in log.txt there.",
        "set -eu",
        ': "${TRAINCTL_RUN_DIR:?set TRAINCTL_RUN_DIR to a folder for this run}"',
    ]
    if plan["secret_files"]:
        lines.append(': "${TRAINCTL_SECRETS_DIR:?set TRAINCTL_SECRETS_DIR to the folder of secret files}"')
    if plan["max_runtime_s"]:
        lines.append(f"# max_runtime: {plan['max_runtime_s']}s (enforced by trainctl's runner)")
    if plan["retries"]:
        lines.append(f"# retries: {plan['retries']} (whole-job restarts by trainctl's runner)")
        lines.append(f"# retry_on: {', '.join(plan['retry_on'])}")
    if plan["code"]:
        lines.append(f"# code: {plan['code']['source']} -> {plan['code']['bundle']}, sha256 {plan['code']['sha256']}")
        if plan["container"]:
            lines.append(f"# (submit writes the bundle there; mounted read-only at {ctr.CODE_BUNDLE}, the launcher")
            lines.append(f"# verifies it and unpacks it into code/src/, {ctr.CODE_DIR} in the container)")
        else:
            lines.append("# (submit writes the bundle there; the launcher verifies it and unpacks it into work/)")
    for name, uri in s3_inputs(job).items():
        lines.append(f"# data.{name}: {uri} is staged into $TRAINCTL_HOME/data-cache by the launcher (--data-cache)")
    if output := s3_output(job):
        lines.append(f"# output_dir: {output}: the launcher uploads the output folder to <it>/<run uid>/ (--output-s3)")
    if plan["cwd"].startswith(RUN_DIR):
        lines.append(f"mkdir -p {_sh(plan['cwd'])}")
    lines.append(f"cd {_sh(plan['cwd'])}")
    lines += [f"export {key}={_sh(value)}" for key, value in plan["env"].items()]
    lines += [f'{key}="$(cat {_sh(path)})"; export {key}' for key, path in plan["secret_files"].items()]
    argv: list[str] = plan["argv"]
    cut = argv.index("--")
    launcher, program = argv[:cut], argv[cut + 1 :]
    if plan["container"]:
        lines.append(': "${TRAINCTL_RUN_ID:=$(basename "$TRAINCTL_RUN_DIR")}"')
        writable = [plan["output_dir"], plan["checkpoint_dir"], plan["cwd"]]
        writable += list(filter(None, [plan["container"].get("code_work")]))
        lines.append(f"mkdir -p {' '.join(_sh(w) for w in writable)}")
        lines.append(
            f"# {plan['container']['runtime']} runs the image as user 10001: these folders must be writable by it."
        )
        lines.append("# The words after the image are options of its ENTRYPOINT, trainer-launch.")
        image_at = launcher.index(plan["container"]["image"])
        opts, rest = launcher[2:image_at], launcher[image_at:]
        groups: list[list[str]] = []
        for word in opts:
            if word.startswith("--"):
                groups.append([word])
            else:
                groups[-1].append(word)
        lines.append("exec " + " ".join(_sh(w) for w in launcher[:2]) + " \\")
        lines += [f"  {' '.join(_sh(w) for w in g)} \\" for g in groups]
        launcher = rest
        lines.append("  " + " ".join(_sh(w) for w in launcher) + " -- \\")
    else:
        lines.append("exec " + " ".join(_sh(w) for w in launcher) + " -- \\")
    if job.trainer is not None:
        head, flags = program[:3], program[3:]
        parts = [" ".join(_sh(w) for w in head)]
        parts += [f"{_sh(flags[i])} {_sh(flags[i + 1])}" for i in range(0, len(flags), 2)]
        lines.append(" \\\n".join("  " + p for p in parts))
    else:
        lines.append("  " + " ".join(_sh(w) for w in program))
    return "\n".join(lines) + "\n"


def render(job: JobSpec) -> Rendered:
    """The exact argv, environment and working directory of the local run, and a readable script of them."""
    plan = plan_of(job)
    notes = []
    if job.spot:
        notes.append("spot: ignored on the local target")
    if job.resources.gpus_per_node:
        notes.append(f"gpus_per_node={job.resources.gpus_per_node}: this machine must have that many GPUs")
    notes += staging_notes(job, "$TRAINCTL_HOME/data-cache", "by the launcher on this machine")
    notes += output_notes(job)
    keys = ["argv", "env", "cwd", "secret_files", "max_runtime_s", "retries", "output_dir", "checkpoint_dir", "code"]
    native = {k: plan[k] for k in keys}
    if plan["retries"]:
        native["retry_on"] = plan["retry_on"]
    if plan["container"]:
        native["container"] = plan["container"]
    return Rendered(
        target="local", text=_script(job, plan), native=native, filename=f"{job.name}.sh", notes=tuple(notes)
    )

"""Where a SLURM job's files go on the cluster's shared filesystem (the workdir, the script and log, the run's
own folder, data, the code bundle): what the batch script (render.py, podman.py) and submit (engine.py) share.
Pure.
"""

from __future__ import annotations

import posixpath
from dataclasses import asdict, dataclass, field
from typing import Any

from ...errors import JobError
from ...spec.job_spec import JobSpec
from ...submit.bundle import prepared
from ..program import (
    s3_checkpoint,
    s3_checkpoint_problems,
    s3_inputs,
    s3_output,
    s3_output_problems,
    s3_trainer_paths,
)
from .section import SlurmSection
from .words import RUN_DIR


@dataclass(frozen=True)
class SlurmPlan:
    """What submit needs besides the script text: where things go on the cluster's shared filesystem.

    `run_dir` and the paths under it start with `${TRAINCTL_RUN_DIR}` (words.py): `<workdir>/runs/<job id>`."""

    workdir: str
    script_path: str
    output: str
    checkpoint_dir: str
    output_dir: str
    run_dir: str = RUN_DIR
    work_dir: str = f"{RUN_DIR}/work"
    data: dict[str, str] = field(default_factory=dict)
    code_bundle: str | None = None
    code_sha256: str | None = None
    data_cache: str | None = None
    """Where the launchers stage the s3:// inputs (`--data-cache`): on the shared filesystem; None without any."""

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def resolve(job: JobSpec, path: str) -> str:
    """Relative paths are from the job file's folder, when known and the cluster is this machine."""
    if posixpath.isabs(path) or job.base_dir is None or job.section_as("slurm", SlurmSection).login is not None:
        return path
    return posixpath.normpath(posixpath.join(job.base_dir.as_posix(), path))


def _data_paths(job: JobSpec) -> dict[str, str]:
    paths: dict[str, str] = {}
    problems: list[str] = []
    for name, uri in sorted(job.data.items()):
        if uri.startswith("file://"):
            uri = uri.removeprefix("file://")
        elif uri.startswith("s3://"):
            if job.section_as("slurm", SlurmSection).container == "podman":
                problems.append(
                    f"data.{name}: {uri}: s3:// data is staged on SLURM with container none, pyxis or apptainer, "
                    "not yet with podman (give a path on the shared filesystem)"
                )
            paths[name] = uri  # staged by the launcher into the shared data cache
            continue
        elif "://" in uri:
            problems.append(
                f"data.{name}: {uri} cannot be read on SLURM; nodes read inputs from a shared filesystem or s3://, "
                "so give a path (copy the data to the cluster first) or an s3:// URI"
            )
            continue
        paths[name] = resolve(job, uri)
    problems += s3_trainer_paths(job)
    section = job.section_as("slurm", SlurmSection)  # srun tasks and podman: as for s3:// data, not yet
    problems += s3_output_problems(job, "srun" if section.launch == "srun" else None,
                                   "podman" if section.container == "podman" else None)  # fmt: skip
    problems += s3_checkpoint_problems(job)
    if problems:
        raise JobError(problems)
    return paths


def plan(job: JobSpec, log_tag: str | None = None) -> SlurmPlan:
    """The cluster-side paths: workdir (default slurm-runs/<name>), log, and the run's own folder
    `<workdir>/runs/<job id>-<uid>/` with checkpoints/, output/ and work/ (a user-set checkpoint.dir or
    output_dir is used as given, and shared by every run that names it). The log `<name>-%j-<tag>.out` is the
    run's own too: its tag is the run's uid (an array's tasks share one: the sweep's id); without a uid (a
    render), `<name>-%j.out`."""
    section = job.section_as("slurm", SlurmSection)
    workdir = resolve(job, section.workdir or f"slurm-runs/{job.name}")
    tag = log_tag or (job.run_identity.uid if job.run_identity else None)
    return SlurmPlan(
        workdir=workdir,
        script_path=posixpath.join(workdir, f"{job.name}.sbatch"),
        output=posixpath.join(workdir, f"{job.name}-%j-{tag}.out" if tag else f"{job.name}-%j.out"),
        checkpoint_dir=resolve(job, job.checkpoint.dir)
        if job.checkpoint.dir and not s3_checkpoint(job)
        else f"{RUN_DIR}/checkpoints",
        output_dir=resolve(job, job.output_dir) if job.output_dir and not s3_output(job) else f"{RUN_DIR}/output",
        data=_data_paths(job),
        data_cache=(resolve(job, section.data_cache) if section.data_cache else posixpath.join(workdir, "data-cache"))
        if s3_inputs(job)
        else None,
        **_code_paths(job, workdir),
    )


def _code_paths(job: JobSpec, workdir: str) -> dict[str, str]:
    """Where submit copies the code bundle: the shared workdir, named by its hash (each run unpacks it into
    its own work/)."""
    code = prepared(job)
    if code is None:
        return {}
    return {"code_bundle": posixpath.join(workdir, f"code-{code.sha256[:12]}.tar.gz"), "code_sha256": code.sha256}

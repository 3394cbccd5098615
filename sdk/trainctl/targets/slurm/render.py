"""Job -> one sbatch script. Pure and deterministic: no I/O, no engine, same job -> same bytes.

Every value that reaches the shell goes through `shlex.quote`; names and paths that land on
`#SBATCH` lines are restricted by the Job and SlurmSection validators (no newlines), so a job
name, an argument, an env value or a data path is always data, never code.
"""

from __future__ import annotations

import posixpath
import shlex
from collections.abc import Sequence

from ...errors import JobError
from ...runs.identity import UID_ENV
from ...runs.provenance import provenance, provenance_env, spec_sha256
from ...runs.record import Provenance
from ...spec.job_spec import JobSpec
from ...spec.units import format_slurm_time
from ...submit.bundle import launcher_env, prepared
from ...version import __version__
from ..base import Rendered
from ..program import (
    data_env,
    launcher_argv,
    output_notes,
    program_argv,
    s3_checkpoint_env,
    staging_notes,
    stream_env,
    streaming_notes,
)
from . import enroot, retry_script, tasks
from . import podman as podman_lines
from .plan import SlurmPlan, plan, resolve
from .section import SlurmSection
from .words import RUN_DIR, run_dir_line, sh, uid_lines

PORT_BASE, PORT_SPAN = 20000, 20000
"""MASTER_PORT = PORT_BASE + job id mod PORT_SPAN: jobs sharing a node do not collide."""


def spec_digest(job: JobSpec) -> str:
    """The header's short fingerprint of the job: the start of its provenance spec sha256 (the job file's path
    would not be deterministic)."""
    return spec_sha256(job)[:12]


def sbatch_options(job: JobSpec, p: SlurmPlan) -> list[str]:
    """The `#SBATCH` options, one per line, in a fixed order."""
    section, res = job.section_as("slurm", SlurmSection), job.resources
    nodes = f"{res.elastic.min_nodes}-{res.elastic.max_nodes}" if res.elastic else str(res.nodes)
    opts = [f"--job-name={job.name}", f"--nodes={nodes}", *tasks.sbatch_layout(job, section)]
    if res.memory_mib is not None:
        opts.append(f"--mem={res.memory_mib}M")
    if job.max_runtime_seconds is not None:
        opts.append(f"--time={format_slurm_time(job.max_runtime_seconds)}")
    for name in ("partition", "account", "qos", "constraint"):
        value = getattr(section, name)
        if value is not None:
            opts.append(f"--{name}={value}")
    if section.exclusive:
        opts.append("--exclusive")
    opts += [f"--output={p.output}", f"--error={p.output}"]
    if section.preemption:
        opts += [f"--signal=USR1@{section.signal_grace_s}", "--requeue", "--open-mode=append"]
    elif job.retries:
        opts += ["--requeue", "--open-mode=append"]
    return opts + list(section.extra_sbatch)


def _sbatch_line(option: str) -> str:
    # sbatch reads these itself; the validators keep them on one line. Quote what has shell-special characters.
    key, sep, value = option.partition("=")
    if sep and shlex.quote(value) != value:
        return f"#SBATCH {key}={shlex.quote(value)}"
    return f"#SBATCH {option}"


COMMAND_WIDTH = 100
"""The program's flags are packed into lines of at most this many characters (a longer flag keeps a line of its own)."""


def _packed(groups: Sequence[str]) -> list[str]:
    """`groups` (a flag with its values, or a word) joined into lines of at most COMMAND_WIDTH characters."""
    lines: list[str] = []
    for group in groups:
        if lines and len(lines[-1]) + 1 + len(group) <= COMMAND_WIDTH:
            lines[-1] += " " + group
        else:
            lines.append(group)
    return lines


def _command_lines(head: Sequence[str], launch: Sequence[str]) -> str:
    """The srun command: `head` lines as given, the launcher quoted on one line, then the program with its flags."""
    cut = list(launch).index("--") + 1
    groups: list[list[str]] = []
    for raw in launch[cut:]:
        if not groups or (raw.startswith("--") and len(raw) > 2):
            groups.append([])
        groups[-1].append(sh(raw))
    lines = [*head, " ".join(sh(a) for a in launch[:cut]), *_packed([" ".join(g) for g in groups])]
    return " \\\n  ".join(line for line in lines if line)


def _container_argv(job: JobSpec, p: SlurmPlan) -> tuple[list[str], list[str]]:
    """(srun options, the wrapper before the launcher) for the section's runtime."""
    section, res = job.section_as("slurm", SlurmSection), job.resources
    mounts = list(section.container_mounts)
    if section.container != "none":
        # The shared paths the trainer reads and writes appear at the same path inside the container.
        local_data = [v for v in p.data.values() if not v.startswith("s3://")]
        for path in (p.workdir, p.checkpoint_dir, p.output_dir, *local_data, *([p.data_cache] if p.data_cache else [])):
            if path.startswith(RUN_DIR):  # under the workdir, mounted already
                continue
            targets = [m.split(":")[1] for m in mounts]
            covered = any(path == t or path.startswith(t.rstrip("/") + "/") for t in targets)
            if posixpath.isabs(path) and not covered:
                if "," in path or ":" in path:
                    raise JobError([f"slurm.container={section.container}: cannot bind-mount {path!r} (',' or ':')"])
                mounts.append(f"{path}:{path}")
    if section.container == "pyxis":  # enroot's [REGISTRY#]IMAGE[:TAG], not Docker's form (enroot.py)
        opts = [f"--container-image={enroot.enroot_reference(job.image)}"]
        if mounts:
            opts.append(f"--container-mounts={','.join(mounts)}")
        return opts, []
    if section.container == "apptainer":
        wrapper = ["apptainer", "exec"]
        if res.gpus_per_node:
            wrapper.append("--nv")
        for mount in mounts:
            wrapper += ["--bind", mount]
        return [], [*wrapper, f"docker://{job.image}"]
    if section.container == "podman":
        return [], podman_lines.wrapper(job, p, mounts, _job_env(job, p))
    return [], []


def _job_env(job: JobSpec, p: SlurmPlan) -> dict[str, str]:
    """The variables the script exports (and podman passes into the container by name)."""
    dirs = {"TRAINER_CHECKPOINT_DIR": p.checkpoint_dir, "TRAINER_OUTPUT_DIR": p.output_dir}
    # as on local: torchrun sets it only with >1 process per node; thread counts change float sums
    process = {k: v for k, v in job.process_env.items() if k != UID_ENV}  # exported before the run's folder
    env = {"OMP_NUM_THREADS": str(job.resources.cpus_per_proc), **data_env(p.data), **stream_env(job), **dirs,
           **s3_checkpoint_env(job), **process}  # fmt: skip
    code = prepared(job)
    if code is not None and p.code_bundle is not None:
        env.update(launcher_env(code, p.code_bundle, p.work_dir, posixpath.join(p.workdir, ".venvs")))
    env.update(provenance_env(job, code.sha256 if code else None, image=_ran_image(job)))
    return env


def run_provenance(job: JobSpec) -> Provenance:
    """What the run's record says it ran: the image, or with `container: none` the nodes' own Python (as the
    script's TRAINCTL_PROVENANCE says, which the trainer copies into summary.json)."""
    code = prepared(job)
    return provenance(job, code.sha256 if code else None, _ran_image(job), job.function)


def _ran_image(job: JobSpec) -> str | None:
    """None: the job's image runs. `container: none` runs no image but the nodes' own environment (slurm.python_env;
    the words leave out "python": the retrying script's host lines are checked to name none)."""
    section = job.section_as("slurm", SlurmSection)
    if section.container != "none":
        return None
    where = f"the environment {section.python_env}" if section.python_env else "the environment on PATH"
    return f"none (slurm.container: none; {where} on the nodes)"


def _env_block(job: JobSpec, p: SlurmPlan) -> list[str]:
    section = job.section_as("slurm", SlurmSection)
    env = _job_env(job, p)
    lines = [
        "# This run's folder (checkpoints/, output/, work/): its job id and uid; a requeue keeps both, so the folder.",
        *uid_lines(p.workdir, job.run_identity.uid if job.run_identity else None),
        run_dir_line(p.workdir),
        "# The job's environment: values are quoted, so they are data and never run.",
    ]
    lines += [f"export {key}={sh(env[key])}" for key in sorted(env)]
    if job.secrets:
        said = "# Secrets are read on the cluster at run time; their values are never written here."
        secrets = sorted(job.secrets, key=lambda s: s.env)
        lines.append(
            f"TRAINCTL_SECRETS_DIR={shlex.quote(section.secrets_dir)}  {said}" if section.secrets_dir else said
        )
        if section.secrets_dir:
            pairs = " ".join(shlex.quote(f"{secret.env}={secret.name}") for secret in secrets)
            lines += [
                f"for secret in {pairs}; do  # ENV=NAME: the file NAME there, else ENV from the cluster environment",
                "  name=${secret%%=*} file=$TRAINCTL_SECRETS_DIR/${secret#*=}",
                '  if [ -r "$file" ]; then value=$(cat -- "$file"); export "$name=$value"',
                '  elif [ -z "${!name:-}" ]; then echo "trainctl: secret ${secret#*=} not found: no readable file $file and $name is not set" >&2; exit 1; fi',
                "done",
            ]
        for secret in secrets if not section.secrets_dir else []:
            lines += [
                f': "${{{secret.env}:?trainctl: secret {secret.name} must arrive in {secret.env} from the '
                f'cluster environment (or set slurm.secrets_dir)}}"',
                f"export {secret.env}",
            ]
    if section.container == "none" and section.python_env:
        lines.append("# The trainer's Python environment on the cluster.")
        lines.append(f'export PATH={shlex.quote(posixpath.join(section.python_env, "bin"))}:"$PATH"')
    return lines


def _attempt_lines(job: JobSpec, p: SlurmPlan) -> tuple[list[str], list[str]]:
    """(before srun, after it): record and classify each attempt, requeue by `retries`/`retry_on` and
    slurm.preemption (retry_script.py); none without either."""
    section = job.section_as("slurm", SlurmSection)
    if not (section.preemption or job.retries):
        return [], []
    before = retry_script.setup_lines(
        p.output, p.checkpoint_dir, p.output_dir, job.retries, [c.value for c in job.retry_on], section.preemption
    )
    return before, retry_script.end_lines(job.retries, section.preemption)


def script(job: JobSpec, log_tag: str | None = None) -> tuple[str, SlurmPlan]:
    """The sbatch script text and its plan (`log_tag`: plan.plan's)."""
    section, res = job.section_as("slurm", SlurmSection), job.resources
    p = plan(job, log_tag)
    # the run's own folders reach the trainer as TRAINER_CHECKPOINT_DIR/OUTPUT_DIR; a user-set one as a flag too
    program = program_argv(
        job,
        python="python",
        data_paths=p.data,
        checkpoint_dir=None if p.checkpoint_dir.startswith(RUN_DIR) else p.checkpoint_dir,
        output_dir=None if p.output_dir.startswith(RUN_DIR) else p.output_dir,
        # beside the job file, as data paths are; a container sees only its mounts (code: or the image has it)
        script_from=(lambda word: resolve(job, word)) if section.container == "none" else None,
    )
    srun_opts, wrapper = _container_argv(job, p)
    head = [" ".join(tasks.srun_words(job, section)), *(shlex.quote(o) for o in srun_opts)]
    podman = section.container == "podman"
    if podman:  # `podman run` and its user, then its flags and mounts packed into lines, then the image
        head += [" ".join(wrapper[:5]), *_packed(wrapper[5:-1]), wrapper[-1]]
    elif wrapper:
        head.append(" ".join(shlex.quote(w) for w in wrapper))
    # podman: the image's ENTRYPOINT is the launcher, so its options follow the image.
    workdir_option = ["--workdir", p.work_dir]  # the launcher runs the program there, in any runtime
    if p.data_cache:  # each node's launcher stages the s3:// inputs there; one downloads, the others wait
        workdir_option += ["--data-cache", p.data_cache]
    srun_mode = "srun" if tasks.per_task(section) else None  # one task per process: the launcher's --launch srun
    launch = launcher_argv(
        job, program, launcher=workdir_option if podman else ["trainer-launch", *workdir_option], mode=srun_mode
    )
    attempt_before, attempt_after = _attempt_lines(job, p)
    folders = (p.workdir, p.run_dir, p.checkpoint_dir, p.output_dir, p.work_dir)
    mkdirs = " ".join(sh(d) for d in dict.fromkeys(folders))
    header = [
        "#!/bin/bash",
        f"# Rendered by trainctl {__version__} from job {job.name} (spec sha256 {spec_digest(job)}).",
        f"# Runtime: container={section.container}; {res.nodes} node(s) x {res.nprocs} process(es); "
        + tasks.layout_words(job, section),
        *(_sbatch_line(o) for o in sbatch_options(job, p)),
    ]
    if p.code_bundle:  # after the #SBATCH lines: sbatch stops reading options at the first other line
        header.append(f"# Code: submit copies the bundle to {p.code_bundle}, sha256 {p.code_sha256};")
        header.append("# each node's launcher verifies that hash and unpacks it into the run's work/ folder.")
    body = [
        "set -euo pipefail",
        "",
        *_env_block(job, p),
        "",
        *(
            f"# data.{name}: {uri} is staged into {p.data_cache} by the first node's launcher (a lock there), "
            "the others read its copy"
            for name, uri in sorted(p.data.items())
            if uri.startswith("s3://") and name not in job.data_stream
        ),
        *(
            f"# data.{name}: {job.data[name]} is streamed by each rank from S3 (ranged GETs, no copy)"
            for name in job.data_stream
        ),
        *([""] if p.data_cache else []),
        "# Rendezvous: the first node of the allocation; the port is derived from the job id.",
        'MASTER_ADDR=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | sed -n 1p) '
        f"MASTER_PORT=$(({PORT_BASE} + SLURM_JOB_ID % {PORT_SPAN})); export MASTER_ADDR MASTER_PORT",
        f"mkdir -p -- {mkdirs}",
        *(podman_lines.user_lines(p) if podman else []),
        'echo "trainctl: job $SLURM_JOB_ID (restart ${SLURM_RESTART_COUNT:-0}) on $SLURM_JOB_NODELIST, '
        'master $MASTER_ADDR:$MASTER_PORT"',
        'echo "trainctl: run $TRAINCTL_RUN_UID in $TRAINCTL_RUN_DIR"',
        *(podman_lines.node_image_step(job) if podman else []),
        *attempt_before,
        "",
        "rc=0  # srun's exit code: the highest of its tasks'",
        _command_lines(head, launch) + " || rc=$?",
        *attempt_after,
        'echo "trainctl: job $SLURM_JOB_ID finished with exit code $rc"',
        'exit "$rc"',
    ]
    body_text = "\n".join(body)
    values = [*launch, *job.process_env.values(), *p.data.values(), section.python_env or "", section.workdir or ""]
    if any("$" in v or "`" in v for v in values if not v.startswith(RUN_DIR)):
        # Quoted values that look like expansions are literal on purpose: that is the point of quoting.
        header.insert(1, "# shellcheck disable=SC2016")
    return "\n".join(header) + "\n" + body_text + "\n", p


def render(job: JobSpec) -> Rendered:
    text, p = script(job)
    notes: list[str] = []
    container = job.section_as("slurm", SlurmSection).container
    if job.spot:
        notes.append("spot: SLURM has no spot capacity; use slurm.partition/qos for a preemptible queue")
    pinned = enroot.digest_note(job.image) if container == "pyxis" else None
    if pinned:
        notes.append(pinned)
    if p.data_cache:
        notes += staging_notes(job, p.data_cache, "by one node (under a lock) on the shared filesystem")
    notes += streaming_notes(job)
    notes += output_notes(job)
    local_data = [v for v in p.data.values() if not v.startswith("s3://")]
    if container != "none" and any(not posixpath.isabs(v) for v in (p.workdir, *local_data)):
        notes.append("container runtimes see only mounted absolute paths: use absolute workdir and data paths")
    return Rendered(
        target="slurm",
        text=text,
        native={"script": text, **p.to_dict()},
        filename=f"{job.name}.sbatch",
        notes=tuple(notes),
    )

"""The local target's render (pure): its plan (plan.py) as a readable, runnable sh script.

The run's folder appears as `${TRAINCTL_RUN_DIR}` (and secret files under `${TRAINCTL_SECRETS_DIR}`);
the engine (engine.py) substitutes them when it starts the run.
"""

from __future__ import annotations

import shlex
from typing import TYPE_CHECKING

from ..base import Rendered
from ..program import output_notes, s3_inputs, s3_output, staging_notes, streaming_notes
from . import container_argv as ctr
from .plan import RUN_DIR, SECRETS_DIR, LocalPlan, plan_of

if TYPE_CHECKING:
    from ...spec.job_spec import JobSpec

PLACEHOLDERS = (RUN_DIR, SECRETS_DIR, ctr.RUN_ID)


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


def _script(job: JobSpec, plan: LocalPlan) -> str:
    """The plan as a readable, runnable sh script (what `trainctl render --target local` prints)."""
    res = job.resources
    backend = "nccl" if res.gpus_per_node else "gloo"
    words = [*plan.argv, plan.cwd, *plan.env.values()]
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
    if plan.secret_files:
        lines.append(': "${TRAINCTL_SECRETS_DIR:?set TRAINCTL_SECRETS_DIR to the folder of secret files}"')
    if plan.max_runtime_s:
        lines.append(f"# max_runtime: {plan.max_runtime_s}s (enforced by trainctl's runner)")
    if plan.retries:
        lines.append(f"# retries: {plan.retries} (whole-job restarts by trainctl's runner)")
        lines.append(f"# retry_on: {', '.join(plan.retry_on)}")
    if plan.code:
        lines.append(f"# code: {plan.code.source} -> {plan.code.bundle}, sha256 {plan.code.sha256}")
        if plan.container:
            lines.append(f"# (submit writes the bundle there; mounted read-only at {ctr.CODE_BUNDLE}, the launcher")
            lines.append(f"# verifies it and unpacks it into code/src/, {ctr.CODE_DIR} in the container)")
        else:
            lines.append("# (submit writes the bundle there; the launcher verifies it and unpacks it into work/)")
    for name, uri in s3_inputs(job).items():
        lines.append(f"# data.{name}: {uri} is staged into $TRAINCTL_HOME/data-cache by the launcher (--data-cache)")
    for name in job.data_stream:
        lines.append(f"# data.{name}: {job.data[name]} is streamed by each rank from S3 (ranged GETs, no copy)")
    if output := s3_output(job):
        lines.append(f"# output_dir: {output}: the launcher uploads the output folder to <it>/<run uid>/ (--output-s3)")
    if plan.cwd.startswith(RUN_DIR):
        lines.append(f"mkdir -p {_sh(plan.cwd)}")
    lines.append(f"cd {_sh(plan.cwd)}")
    lines += [f"export {key}={_sh(value)}" for key, value in plan.env.items()]
    lines += [f'{key}="$(cat {_sh(path)})"; export {key}' for key, path in plan.secret_files.items()]
    argv = plan.argv
    cut = argv.index("--")
    launcher, program = argv[:cut], argv[cut + 1 :]
    if plan.container:
        lines.append(': "${TRAINCTL_RUN_ID:=$(basename "$TRAINCTL_RUN_DIR")}"')
        writable = [plan.output_dir, plan.checkpoint_dir, plan.cwd]
        writable += plan.container.writable()
        lines.append(f"mkdir -p {' '.join(_sh(w) for w in writable)}")
        lines.append(f"# {plan.container.runtime} runs the image as user 10001: these folders must be writable by it.")
        lines.append("# The words after the image are options of its ENTRYPOINT, trainer-launch.")
        image_at = launcher.index(plan.container.image)
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
    notes += streaming_notes(job)
    notes += output_notes(job)
    return Rendered(
        target="local", text=_script(job, plan), native=plan.native(), filename=f"{job.name}.sh", notes=tuple(notes)
    )

"""What `trainctl validate` and `trainctl render` do once their arguments are parsed, without typer.

The typer commands (cli/jobs.py) and the typer-free start (cli/fast.py) both call these, so the two
write the same bytes; nothing here imports typer, the runner or the engine libraries.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from .output import OutputFormat, echo, load_job, print_json


def describe(job: Any, backend: str) -> str:
    res = job.resources
    what = f"trainer ({job.trainer.model})" if job.trainer is not None else f"command {job.command[0]!r}"
    if job.launch == "per_node":
        return f"{what} once per node (launch: per_node), {res.nodes} node(s) x {res.nprocs} process(es)"
    return f"{what}, {res.nodes} node(s) x {res.nprocs} process(es) = world size {res.world_size}, {backend}"


def warn(job: Any, target: str) -> None:
    """`warning: ...` on stderr for what would run but likely not as meant (preflight.advice)."""
    from ..submit.preflight import advice
    from ..targets.registry import canonical

    for warning in advice(job, canonical(target)):
        echo(f"warning: {warning}", err=True)


def validate_job(job_file: Path, target: str, overrides: list[str], output: OutputFormat, options: list[str]) -> None:
    """Check the job as `submit --target` would and say so (or raise the JobError that names what is wrong); the
    line names the backend the run will use, as the target's GPU advice does (preflight.backend)."""
    from ..spec.loading import parse_options
    from ..targets.registry import canonical

    target = canonical(target)
    job = load_job(job_file, overrides)
    warnings = job.check(target, **parse_options(options))
    if output is OutputFormat.json:
        print_json({"valid": True, "target": target, "job": job.to_dict(), "warnings": warnings})
    else:
        from ..submit.preflight import backend

        echo(f"ok: job {job.name!r} is valid for {target}: {describe(job, backend(job, target))}")
        for warning in warnings:
            echo(f"warning: {warning}", err=True)


def render_job(job_file: Path, target: str, out: Path | None, overrides: list[str], output: OutputFormat) -> None:
    """Write the target's artifact (its text, or its native object as JSON) to stdout or `out`, notes on stderr."""
    job = load_job(job_file, overrides)
    rendered = job.render(target)
    warn(job, target)
    if output is OutputFormat.json:
        from ..targets.base import json_text

        text = json_text(rendered.native)
    else:
        text = rendered.text
    if out is not None:
        out.write_text(text)  # under the umask, as `> FILE`: a render names secrets but never holds a value
        echo(f"wrote {out} ({target})", err=True)
    else:
        sys.stdout.write(text)
    for note in rendered.notes:
        echo(f"note: {note}", err=True)
    if job.search_space is not None:
        echo(
            f"note: this is one run of the job; `trainctl sweep {job_file} -t {target} --dry-run` shows what its "
            "sweep: section sends (bayesian on sagemaker: the CreateHyperParameterTuningJob request)",
            err=True,
        )

"""The lines `trainctl render --target sagemaker` prints beside the request: cost, instance, what runs. Pure."""

from __future__ import annotations

from ...runs.provenance import ENV as PROVENANCE_ENV
from ...spec.job_spec import JobSpec
from . import container as ct
from . import groups
from .instances import lookup
from .request import (
    CODE_TARBALL,
    DEFAULT_MAX_RUNTIME_S,
    SECRET_ENV_PREFIX,
    environment,
    section,
    with_instance_defaults,
)

RETRIES_NOTE = (
    "retries: {n} becomes RetryStrategy.MaximumRetryAttempts={n}; SageMaker retries a job only when it fails "
    "with InternalServerError (its own fault), never when the training fails (AlgorithmError, a non-zero exit), "
    "unlike the local, SLURM and Kubernetes targets; resources.max_restarts restarts the processes inside the job"
)


def cost_note(job: JobSpec) -> str:
    """`cost: 2 x ml.g5.12xlarge at ~$7.09/h = ~$14.18/h on demand; at most ~$28.36 for max_runtime 2h`."""
    sec = section(job)
    counts = [(g.instance_type, g.count) for g in sec.instance_groups] or [
        (sec.instance_type or "", job.resources.nodes)
    ]
    found = [(lookup(name), count) for name, count in counts]
    if any(inst is None for inst, _ in found):
        return "cost: unknown instance type"
    hourly = sum(inst.usd_per_hour * count for inst, count in found if inst is not None)
    parts = " + ".join(f"{count} x {inst.name} at ~${inst.usd_per_hour:.2f}/h" for inst, count in found if inst)
    runtime = job.max_runtime_seconds or DEFAULT_MAX_RUNTIME_S
    spot = " (managed spot bills less, by the spot discount)" if job.spot else ""
    return (
        f"cost: {parts} = ~${hourly:.2f}/h on demand{spot}; "
        f"at most ~${hourly * runtime / 3600:.2f} for MaxRuntimeInSeconds={runtime} "
        "(approximate us-east-1 list prices)"
    )


def notes(job: JobSpec) -> tuple[str, ...]:
    sec = section(job)
    resolved = with_instance_defaults(job)
    inst = lookup(groups.instance_type(job) or "")
    lines = [cost_note(job)]
    if inst is not None:
        gpu = f"{inst.gpus} x {inst.gpu_model} GPU" if inst.gpus else "no GPU"
        lines.append(f"instance: {inst.name}: {gpu}, {inst.vcpus} vCPUs, {inst.memory_gib} GiB")
        if resolved is not job:
            lines.append(
                f"resources.gpus_per_node unset: {inst.gpus} from {inst.name} ({inst.gpus} processes per node)"
            )
    lines.append(
        "TrainingJobName here is <name>-<job hash>; submit uses <name>-<UTC timestamp>-<4 random hex> (one name per run)"
    )
    lines += [
        f"data.{name}: mode: stream: on SageMaker the channel is read as any other (sagemaker.input_mode "
        f"{sec.input_mode}; FastFile streams it from S3 on demand); the program reads /opt/ml/input/data/{name}/"
        for name in sorted(job.data_stream)
    ]
    if ct.container(job) == "trainctl":
        lines.append(
            'container: trainctl\'s image; ContainerEntrypoint ["train"] runs its train script (trainer-launch) '
            "with ContainerArguments (processes per node, restarts); the launcher reads the program from HyperParameters"
        )
    else:
        lines.append(
            "container: the sagemaker-training toolkit (the image's own entry point, as the SageMaker SDK runs it): "
            "it downloads sagemaker_submit_directory and runs sagemaker_program with torchrun"
        )
    if sec.instance_groups:
        train = groups.training_group(job)
        lines.append(
            f"instance groups: torchrun spans group {train.name if train else '?'!r} only; the other groups' hosts "
            "run the program once"
        )
    if sec.source_dir is not None:
        from ...submit.bundle import describe, prepared_if_present

        code = prepared_if_present(job)
        where = f"{CODE_TARBALL} at sagemaker_submit_directory (the `code` channel)"
        lines.append(describe(code, where) if code else f"submit packs {sec.source_dir} into {where}")
    if job.secrets:
        lines.append(
            f"secrets: {SECRET_ENV_PREFIX}<ENV> carries the Secrets Manager id (and #key); the value is read "
            "at run time with the execution role, never written into the request"
        )
    if PROVENANCE_ENV not in environment(job):
        lines.append(
            f"provenance: {PROVENANCE_ENV} left out of Environment (100 variables at most, 512 characters a value); "
            "the run store still records it, summary.json will not"
        )
    if job.retries:
        lines.append(RETRIES_NOTE.format(n=job.retries))
    if job.spot and sec.max_wait_seconds is None:
        lines.append("spot: MaxWaitTimeInSeconds defaults to MaxRuntimeInSeconds (no time spent waiting for capacity)")
    return tuple(lines)

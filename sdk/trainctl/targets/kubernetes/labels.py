"""The labels and annotations of a Kubernetes run that trainctl retries (attempts.py says what they mean).
Pure and small: render imports it (the job's object carries the first two), so it stays free of run records."""

from __future__ import annotations

from ...spec.job_spec import JobSpec

RETRIES_LABEL = "trainctl.dev/retries"
"""On a run's object: trainctl retries it, at most this many times (its operator's restarts are off)."""
ATTEMPT_OF_LABEL = "trainctl.dev/attempt-of"
"""On attempt N > 1: the run's object it retries."""
RETRY_ON = "trainctl.dev/retry-on"
ATTEMPTS = "trainctl.dev/attempts"
OUTCOME = "trainctl.dev/outcome"
SEED = "trainctl.dev/seed"
"""What attempt N copies from attempt N-1's checkpoint folder (seed.py): `steps` (the trainer's step-* folders)
or `all` (a `command:` job's whole folder)."""


def driven_metadata(job: JobSpec) -> tuple[dict[str, str], dict[str, str]]:
    """(labels, annotations) a job with `retries` puts on its object: render adds them."""
    if not job.retries:
        return {}, {}
    notes = {RETRY_ON: ",".join(c.value for c in job.retry_on), SEED: "all" if job.trainer is None else "steps"}
    return {RETRIES_LABEL: str(job.retries)}, notes

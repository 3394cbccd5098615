"""What ran: image reference (and digest where the reference has one), code sha256, job spec sha256, version.

Two runs with the same three hashes ran the same thing. Recorded in the run registry at submit,
shown by `trainctl status`, and passed to the trainer (`TRAINCTL_PROVENANCE`) for summary.json.
"""

from __future__ import annotations

import hashlib
import json
from typing import TYPE_CHECKING

from ..version import __version__
from .record import Provenance

if TYPE_CHECKING:
    from ..function import Function
    from ..spec.job_spec import JobSpec

ENV = "TRAINCTL_PROVENANCE"


def spec_sha256(job: JobSpec) -> str:
    """sha256 of the job as written (canonical JSON of what differs from the defaults, sorted keys).

    Defaults are left out so a trainctl that adds a field keeps every job's hash; the version is recorded beside it.
    """
    text = json.dumps(job.to_dict(), sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()


def provenance(
    job: JobSpec, code_sha256: str | None, image: str | None = None, function: Function | None = None
) -> Provenance:
    """`image` overrides the job's where no image runs (the local target runs a Python on this machine);
    `function`: a function job's payload, and the Python and cloudpickle that pickled it (function.py)."""
    image = image or job.image
    digest = image.split("@", 1)[1] if "@sha256:" in image else None
    return Provenance(
        image=image,
        image_digest=digest,
        code_sha256=code_sha256,
        spec_sha256=spec_sha256(job),
        trainctl_version=__version__,
        function=None if function is None else {
            "name": function.name, "sha256": function.sha256, "modules": list(function.modules),
            "python": function.python, "cloudpickle": function.cloudpickle,
        },
    )  # fmt: skip


def provenance_env(job: JobSpec, code_sha256: str | None, image: str | None = None) -> dict[str, str]:
    """The env var the trainer copies into summary.json."""
    found = provenance(job, code_sha256, image, job.function).model_dump(mode="json")
    return {ENV: json.dumps(found, sort_keys=True, separators=(",", ":"))}

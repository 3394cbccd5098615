"""A run's identity: a uid of 128 random bits that submit gives every run, which no engine can repeat.

Engine ids repeat: a SLURM cluster whose state was reset numbers its jobs from 2 again, two clusters over one
shared filesystem number theirs independently, ids wrap at MaxJobId, and a Kubernetes object name can be used
again once the old object is deleted. So the files a run keeps trust the uid, never an engine id: it is part
of the run's folder name where the folder is trainctl's (SLURM `runs/<job id>-<uid>`, Kubernetes
`<job>/<object>-<uid>`), its marker file (`run-uid`, written by the trainer's launcher), every checkpoint's
metadata and every attempt record. The engine id stays what users type.

Every process gets the uid as `TRAINCTL_RUN_UID`; a run that `--resume-from` continues another also gets that
run's uid as `TRAINCTL_RESUMES_RUN_UID` (`none` when it had none), the one other run whose checkpoints the
trainer's automatic resume accepts. Pure: no I/O.
"""

from __future__ import annotations

import re
import secrets
from dataclasses import dataclass
from typing import Protocol, TypeVar

UID_ENV = "TRAINCTL_RUN_UID"
RESUMES_ENV = "TRAINCTL_RESUMES_RUN_UID"
NO_UID = "none"
"""What `TRAINCTL_RESUMES_RUN_UID` says when the continued run had no uid (recorded before uids existed)."""
_UID = re.compile(r"^[0-9a-f]{32}$")


def new_uid() -> str:
    """128 random bits as 32 hex digits (what `secrets` gives: unguessable, never repeated in practice)."""
    return secrets.token_hex(16)


def is_uid(text: str) -> bool:
    return bool(_UID.match(text))


@dataclass(frozen=True)
class RunIdentity:
    """The uid of a submitted run and, with `--resume-from`, the uid of the run it continues."""

    uid: str
    resumes: str | None = None

    @classmethod
    def new(cls, resumes: str | None = None, resuming: bool = False) -> RunIdentity:
        """A fresh identity; `resuming` a run whose uid is `resumes` (None: a run recorded without one)."""
        return cls(new_uid(), (resumes or NO_UID) if resuming else None)

    def env(self) -> dict[str, str]:
        """What every process of the run gets."""
        return {UID_ENV: self.uid, **({RESUMES_ENV: self.resumes} if self.resumes else {})}


class _Identified(Protocol):
    @property
    def run_identity(self) -> RunIdentity | None: ...

    def with_identity(self, identity: RunIdentity | None, /) -> _Identified: ...


J = TypeVar("J", bound=_Identified)


def with_identity(job: J) -> J:
    """The job with a uid: its own (submit gave it one), else a new one (an engine called directly)."""
    if job.run_identity is not None:
        return job
    return job.with_identity(RunIdentity.new())  # type: ignore[return-value]


def uid_of(job: _Identified) -> str | None:
    """The job's run uid, if submit gave it one."""
    return job.run_identity.uid if job.run_identity is not None else None

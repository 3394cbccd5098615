"""What a run is, as data: its states, its status now, and its record. Every layer may import this.

The record (`RunRef`) is what trainctl knows about a run over its life, typed the same way on every
target: where it keeps its log, checkpoints and output, what ran (provenance), where it came from
(`--resume-from`), its attempts, its progress, its tracker run and sweep. The anchor is TorchX's
`DescribeAppResponse` (torchx/schedulers/api.py): one typed answer per app (app_id, state, num_restarts,
msg, roles_statuses...) with `metadata: dict[str, str]` left for what a scheduler alone knows. Here that
last part is typed too: each target's own handle (a SLURM job's shell, a Kubernetes namespace and context,
a SageMaker region) is a `RunHandle` subclass owned by the target's package, named by its plug-in.
`trainctl.run.Run` is the same record with the methods that act on it (status, logs, wait, cancel).
"""

from __future__ import annotations

import time
from enum import Enum
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, SerializeAsAny
from typing_extensions import Self

from .causes import Cause
from .record import Provenance, Record
from .times import duration, local_time


class RunState(str, Enum):
    """trainctl's states; each target maps its engine's states onto these."""

    QUEUED = "queued"
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    CANCELLED = "cancelled"
    UNKNOWN = "unknown"

    @property
    def finished(self) -> bool:
        return self in (RunState.SUCCEEDED, RunState.FAILED, RunState.CANCELLED)


class Images(Record):
    """Which image each node, pod or container of a run ran, as its engine reported it (runs/image_ids.py)."""

    ids: dict[str, str] = Field(default_factory=dict, description='{node: image ID} ("" where none was reported)')
    same: str | None = Field(None, description="The one image ID, when every one reported the same.")
    warning: str | None = Field(None, description="Set when two or more different images ran.")


class SlowNode(Record):
    """A node the trainer's straggler check flagged (its slow_nodes.json, docs/contracts.md section 2)."""

    node: str
    rank: int | None = None
    ratio: float | None = Field(None, description="Its compute time over the median of all nodes.")
    max_ratio: float | None = None
    compute_ms: float | None = None
    median_ms: float | None = None
    first_step: int | None = None
    last_step: int | None = None


class Suspect(Record):
    """A rank a hang verdict points at."""

    node: str | None = None
    rank: int | None = None
    heartbeat_age_s: float | None = None
    why: str | None = None


class Failure(Record):
    """The verdict that ended an attempt, as the trainer or launcher wrote it (its failure.json): a hang, a slow
    node, or the program's error (`error`: its first failing rank, trainer/first_failure.py)."""

    kind: str = Field(..., description="hang, slow_node or error")
    source: str | None = Field(None, description="trainer, launcher, or runtime (its container never started)")
    step: int | None = None
    exit_code: int | None = None
    time: float | None = Field(None, description="When it was written (Unix time).")
    time_utc: str | None = None
    suspects: list[Suspect] = Field(default_factory=list)
    rank: int | None = Field(None, description="The rank that failed first (an error).")
    node: str | None = Field(None, description="Its node.")
    signal: str | None = Field(None, description="The signal that ended it, if one did.")
    exception: str | None = Field(None, description="Its exception's type (RuntimeError), where it was Python's.")
    message: str | None = Field(None, description="The exception's message.")
    log_tail: list[str] | None = Field(None, description="That rank's last output lines.")


class Attempt(Record):
    """One engine job of a run: a retry, a requeue, an automatic resume each start another."""

    number: int = Field(1, ge=1)
    engine_id: str = Field(..., description="The engine's id of this attempt (a SLURM job id, a training job name).")
    state: RunState | None = None
    cause: Cause | None = None
    exit_code: int | None = None
    nodes: str | None = Field(None, description="Where it ran, in the engine's words (SLURM's NodeList).")
    blamed_nodes: list[str] = Field(default_factory=list, description="Nodes the cause points at; a retry avoids them.")
    started_at: float | None = None
    ended_at: float | None = None
    resumed_from_step: int | None = Field(
        None, description="The newest published checkpoint when it started: the step it resumed from."
    )
    reason: str | None = Field(None, description="The engine's own words for its end, where they add to the cause.")


class Progress(Record):
    """How far the run is: the trainer's (or a `command:` program's) last reported step (progress.py reads it;
    docs/contracts.md "Progress" is the protocol)."""

    step: int | None = None
    total_steps: int | None = None
    epoch: int | None = None
    loss: float | None = None
    samples_per_s: float | None = None
    eta_s: float | None = Field(None, description="Seconds left, at the recent step rate.")
    updated_at: float | None = Field(None, description="When the trainer reported it (Unix time).")
    deterministic: bool | None = Field(
        None, description="Whether the trainer runs deterministic algorithms (its `deterministic`, auto resolved)."
    )


class RunStatus(Record):
    """The state now, the engine's own words for it, and the facts every target reports the same way;
    `details` holds what only one engine says (a SageMaker secondary status, a pod's phase)."""

    state: RunState
    native_state: str = ""
    reason: str = ""
    exit_code: int | None = Field(None, description="The job's exit code, as the engine reports it.")
    nodes: str | None = Field(None, description="Where it ran, in the engine's words (SLURM's NodeList).")
    restarts: int | None = Field(None, description="How often the engine restarted or requeued it.")
    log: str | None = Field(None, description="Its log, where the engine keeps it.")
    log_tail: list[str] = Field(default_factory=list, description="The last log lines of a failed run.")
    images: Images | None = None
    slow_nodes: list[SlowNode] = Field(default_factory=list, description="Nodes the straggler check flagged.")
    failure: Failure | None = Field(None, description="Why the trainer or launcher ended the last attempt.")
    attempts: list[Attempt] = Field(default_factory=list, description="Each attempt so far, as the engine recorded it.")
    progress: Progress | None = Field(None, description="How far it has got, where the target can read it.")
    details: dict[str, Any] = Field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return self.model_dump(mode="json", exclude_none=True)

    def ended_at(self) -> float | None:
        """When the run ended, if it has: its target's time (a local run's exit.json, the last attempt's end),
        else now, the moment a status first saw it ended (the run store keeps the first)."""
        if not self.state.finished:
            return None
        given = self.details.get("finished_at")
        last = self.attempts[-1].ended_at if self.attempts else None
        return float(given) if isinstance(given, (int, float)) else last if last is not None else time.time()

    def __repr__(self) -> str:
        """`RunStatus(succeeded, exit 0, finished 2026-11-24 04:40:12 (5m ago), took 12.3s)`: its words, not an enum
        and epoch floats."""
        words = [self.state.value]
        if self.native_state and self.native_state != self.state.value:
            words.append(self.native_state)
        if self.reason:
            words.append(f"reason: {self.reason}")
        start, end = self.details.get("started_at"), self.details.get("finished_at")
        if isinstance(end, (int, float)):
            words.append(f"finished {local_time(end)}")
            if isinstance(start, (int, float)):
                words.append(f"took {duration(end - start)}")
        elif isinstance(start, (int, float)):
            words.append(f"started {local_time(start)}")
        return f"RunStatus({', '.join(words)})"

    __str__ = __repr__  # print(run.status()) reads the same


class Paths(Record):
    """Where the run keeps things, as its target names them (a path on its filesystem, an s3:// prefix)."""

    run_dir: str | None = Field(None, description="The run's own folder (docs/your-program.md).")
    work_dir: str | None = Field(None, description="The program's working folder.")
    checkpoint_dir: str | None = None
    output_dir: str | None = None
    output_s3: str | None = Field(
        None, description="Where node 0 uploads the output folder after each attempt (output_dir: s3://...)."
    )
    log: str | None = None


class Lineage(Record):
    """Where a `--resume-from` run came from (submit/resume.py): the source run, its checkpoint, where it went."""

    run: str
    target: str
    checkpoint: str
    copied_to: str
    step: int | None = None
    samples: int | None = None
    epoch: int | None = None
    world_size: int | None = None
    model: str | None = None
    changes: list[str] = Field(
        default_factory=list, description="Each trainer setting that changed (lr 0.003 -> 0.01)."
    )
    by: str | None = Field(None, description="Who copied it, when not trainctl (the new run's own pods).")


class RunHandle(BaseModel):
    """What a target needs to find its run again. Each target subclasses it in its own package (its plug-in
    names the class); this base keeps whatever it is given, so the runs of a target that is no longer
    installed still load and list."""

    model_config = ConfigDict(frozen=True, extra="allow", defer_build=True)

    @classmethod
    def from_meta(cls, meta: dict[str, Any]) -> Self:
        """The handle from an old run-store row's meta (before typed records: one flat dict per run)."""
        return cls.model_validate(meta)


class TargetHandle(RunHandle):
    """The base of a target's own handle: typed fields only (unknown keys of a newer trainctl are dropped)."""

    model_config = ConfigDict(frozen=True, extra="ignore", defer_build=True)

    @classmethod
    def from_meta(cls, meta: dict[str, Any]) -> Self:
        return cls.model_validate({k: v for k, v in meta.items() if k in cls.model_fields})

    @classmethod
    def of(cls, run: RunRef) -> Self:
        """The run's handle as this target's type (a bare `Run.from_id` handle, or one loaded without the
        plug-in, is read into it)."""
        found = run.handle
        return found if isinstance(found, cls) else cls.from_meta(found.model_dump())


class RunRef(BaseModel):
    """The record of a run on an engine: every field typed, `handle` the target's own."""

    model_config = ConfigDict(frozen=True, extra="forbid", defer_build=True)

    target: str
    native_id: str
    job_name: str = ""
    run_uid: str | None = Field(None, description="The uid submit gave the run (identity.py): what its files trust.")
    created_at: float = Field(default_factory=time.time)
    paths: Paths = Field(default_factory=Paths)
    provenance: Provenance | None = None
    resumed_from: Lineage | None = None
    attempts: list[Attempt] = Field(default_factory=list)
    progress: Progress | None = None
    tracker_run_id: str | None = Field(None, description="The run's one tracker run (MLflow, W&B) across attempts.")
    tracker_uri: str | None = Field(None, description="The MLflow server of that run (the status refresh settles it).")
    sweep_id: str | None = Field(None, description="The sweep this run belongs to.")
    finished_at: float | None = Field(
        None, description="When it ended: its target's time, else when a status first saw it ended (`list`)."
    )
    reason: str = Field("", description="Why it ended as it did, in its target's words (status's reason).")
    handle: SerializeAsAny[RunHandle] = Field(default_factory=RunHandle)

    @property
    def id(self) -> str:
        return f"{self.target}:{self.native_id}"

    def record(self) -> dict[str, Any]:
        """The record as JSON-ready data, its id first (`trainctl status --output json`, the run store)."""
        return {"id": self.id, **self.model_dump(mode="json")}

    def __eq__(self, other: object) -> bool:
        """Equal data is the same run, whether held as a bare `RunRef` or a `Run` handle."""
        return isinstance(other, RunRef) and self.record() == other.record()

    __hash__ = None  # type: ignore[assignment]  # equal by value, like a dict

"""What every target provides (`Target`), its typed submit options, and the rendered artifact.

In the spirit of TorchX's `Scheduler`, smaller: `render` is the dry run (pure: job -> typed request
-> exact bytes); `schedule` is the only step that talks to the engine. `submit` checks the options
first, the same way on every target, so an unknown or mistyped option is a JobError (exit 2) that
names it and lists what the target takes.
"""

from __future__ import annotations

import contextlib
import json
from abc import ABC, abstractmethod
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from types import ModuleType
from typing import TYPE_CHECKING, Any, ClassVar, Generic, TypeVar

from pydantic import BaseModel, ConfigDict, ValidationError

from ..errors import JobError, did_you_mean, short_repr

if TYPE_CHECKING:
    from pathlib import Path

    from ..runs.state import Progress, RunRef, RunStatus
    from ..spec.job_spec import JobSpec
    from ..spec.target_section import TargetSection
    from .engine_contract import Engine
    from .transfer import Accept, Fetched


@dataclass(frozen=True)
class Rendered:
    """A target's native artifact: `native` is the object (dict, argv...), `text` its exact bytes."""

    target: str
    text: str
    native: Any
    filename: str
    notes: tuple[str, ...] = field(default_factory=tuple)

    def __str__(self) -> str:
        return self.text

    def __repr__(self) -> str:
        """The artifact's text as it is (a notebook cell shows it, not an escaped one-line string), then its notes."""
        notes = "".join(f"# note: {note}\n" for note in self.notes)
        return f"# {self.target}: {self.filename}\n{self.text}{notes}"


def json_text(obj: Any) -> str:
    """Deterministic JSON for rendered artifacts: sorted keys, two-space indent, trailing newline."""
    return json.dumps(obj, indent=2, sort_keys=True, ensure_ascii=False) + "\n"


class SubmitOptions(BaseModel):
    """A target's submit options: typed, strict (no "yes" for a bool), unknown names refused."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True, arbitrary_types_allowed=True)


class NoOptions(SubmitOptions):
    """For targets whose submit takes no options."""


OptionsT = TypeVar("OptionsT", bound=SubmitOptions)


class Target(ABC, Generic[OptionsT]):
    """One target: its name (its plug-in's, targets/registry.py), its job section, its submit options, its verbs."""

    name: ClassVar[str]
    section: ClassVar[type[TargetSection]]
    options: ClassVar[type[SubmitOptions]]
    status_is_free: ClassVar[bool] = False
    """Its runs' states are files on this machine (no engine, no network): `trainctl list` reads them every time."""

    def parse_options(self, **options: Any) -> OptionsT:
        """The typed options, or a JobError naming each unknown or mistyped one and what is accepted."""
        try:
            parsed = self.options.model_validate(options)
        except ValidationError as exc:
            known = list(self.options.model_fields)
            takes = f"it takes {', '.join(known)}" if known else "it takes none"
            problems = []
            for err in exc.errors():
                key = ".".join(str(p) for p in err["loc"])
                if err["type"] == "extra_forbidden":
                    problems.append(
                        f"submit option {key!r}: unknown to the {self.name} target{did_you_mean(key, known)}; {takes}"
                    )
                else:
                    problems.append(f"submit option {key}: got {short_repr(err.get('input'))}; {err['msg'].lower()}")
            raise JobError(problems, f"{self.name} submit options") from None
        return parsed  # type: ignore[return-value]  # self.options is OptionsT's class

    def submit(self, job: JobSpec, **options: Any) -> RunRef:
        """Check the options, prepare the code bundle, then schedule (the only step with I/O)."""
        from ..submit.bundle import prepare

        return self.schedule(prepare(job), self.parse_options(**options))

    @abstractmethod
    def render(self, job: JobSpec) -> Rendered:
        """The exact artifact the engine would get. Pure: no I/O, no engine import; a `code:` job's bundle
        was packed before (bundle.prepare) and is read from the job (bundle.prepared)."""

    def check_inputs(self, job: JobSpec, options: OptionsT) -> list[str]:
        """What the job needs here that would only fail after submit (files this machine must have); no engine
        is asked. Empty: nothing to check (preflight.check, which `validate` and `submit` both call)."""
        return []

    def advice(self, job: JobSpec) -> list[str]:
        """What would run but likely not as meant on this target (warnings, not refusals): the local target's
        GPUs this machine does not have. Empty by default; no engine is asked."""
        return []

    def gpus_shown(self) -> int | None:
        """The GPUs a node of this target shows, where that node is this machine (local: the driver's count);
        None where the nodes are elsewhere and have what the job asks. Validate's backend and GPU advice read it."""
        return None

    def render_for(self, job: JobSpec, options: OptionsT) -> Rendered:
        """The artifact submit with these options sends (SageMaker's local mode takes local data paths)."""
        return self.render(job)

    @abstractmethod
    def schedule(self, job: JobSpec, options: OptionsT) -> RunRef:
        """Hand the job to the engine; return the run (not waiting for it to start)."""

    @abstractmethod
    def engine(self) -> ModuleType:
        """The target's engine module, imported here on first use (render never pays for it).

        It keeps the contract (engine_contract.py): `status`, `logs` and `cancel`, and the capabilities it has."""

    def engine_for(self, run: RunRef) -> Engine:
        """The engine that runs `run`: the target's, unless a run of this target has one of its own (SageMaker's
        local mode); every verb on one run asks it, so no engine function asks again which kind of run it has."""
        engine: Engine = self.engine()
        return engine

    def status(self, run: RunRef) -> RunStatus:
        return self.with_progress(run, self.engine_for(run).status(run))

    def with_progress(self, run: RunRef, status: RunStatus) -> RunStatus:
        """The status with the run's progress (progress.py), where the engine did not read it with the state:
        `engine.progress(run)` reads it where the target keeps it (the run folder, the job's output)."""
        from ..runs.state import RunState  # here: a render, which imports this module, loads no run records
        from .engine_contract import ReadsProgress

        engine = self.engine_for(run)
        if status.progress is not None or not isinstance(engine, ReadsProgress) or status.state is RunState.QUEUED:
            return status
        from ..errors import TrainctlError

        try:
            found = engine.progress(run)
        except TrainctlError:  # the state was read; progress that cannot be read now is left out
            return status
        return status if found is None else status.model_copy(update={"progress": found})

    def status_many(self, runs: Sequence[RunRef]) -> dict[str, RunStatus]:
        """{run id: status} of many runs of this target (`trainctl list --refresh`), in as few engine calls
        as the engine allows: `engine.status_many` where it has one (SLURM: one scontrol call for all, as
        submitit's InfoWatcher does), else one `status` each. A run whose status cannot be read is left out."""
        from .engine_contract import StatusOfMany

        engine = self.engine()
        if isinstance(engine, StatusOfMany):
            found = engine.status_many(runs)
            return self._with_progress_many([run for run in runs if run.id in found], found)
        from ..errors import TrainctlError

        statuses = {}
        for run in runs:
            with contextlib.suppress(TrainctlError):
                statuses[run.id] = self.status(run)
        return statuses

    def _with_progress_many(self, runs: Sequence[RunRef], found: dict[str, RunStatus]) -> dict[str, RunStatus]:
        """`with_progress` of each run, through one `engine.progress_many` where the engine has one (SLURM: one
        call to the cluster for all, not one each)."""
        from .engine_contract import ProgressOfMany

        engine = self.engine()
        if not isinstance(engine, ProgressOfMany):
            return {run.id: self.with_progress(run, found[run.id]) for run in runs}
        from ..errors import TrainctlError
        from ..runs.state import RunState

        ask = [r for r in runs if found[r.id].progress is None and found[r.id].state is not RunState.QUEUED]

        read: dict[str, Progress | None] = {}
        with contextlib.suppress(TrainctlError):  # the states were read; progress that cannot be is left out
            read = engine.progress_many(ask)
        return {
            run.id: found[run.id]
            if read.get(run.id) is None
            else found[run.id].model_copy(update={"progress": read[run.id]})
            for run in runs
        }

    def metrics_many(self, runs: Sequence[RunRef]) -> dict[str, list[dict[str, Any]]]:
        """{run id: metric rows} of many runs of this target (a sweep's trials), through one
        `engine.metrics_many` where the engine has one, else one `metrics` each; a run whose rows cannot be
        read is left out."""
        from ..errors import TrainctlError
        from .engine_contract import MetricsOfMany

        engine = self.engine()
        found: dict[str, list[dict[str, Any]]] = {}
        if isinstance(engine, MetricsOfMany):
            try:
                found.update(engine.metrics_many(runs))
            except TrainctlError:  # the cluster did not answer: not once more per run
                return found
        for run in runs:  # those the engine left out, one at a time
            if run.id not in found:
                with contextlib.suppress(TrainctlError, OSError):
                    found[run.id] = self.metrics(run)
        return found

    def logs(self, run: RunRef, follow: bool = False, rank: int | None = None) -> Iterator[str]:
        """The run's log lines; `rank`: one node rank's only, where the target keeps them apart (as TorchX's
        `Scheduler.log_iter` takes a replica `k`)."""
        if rank is not None:
            raise JobError([f"rank: the {self.name} target keeps one log per run; leave the rank out"])
        return self.engine_for(run).logs(run, follow=follow)

    def search_engine(self) -> ModuleType | None:
        """The engine's own search of a sweep's space (`strategy: bayesian`: a SageMaker HyperParameterTuningJob),
        a module with render/submit/describe/trials/stop (targets/sagemaker/tuning_engine.py); None where the
        engine has none, and a bayesian sweep is refused."""
        return None

    def trial_job(self, job: JobSpec, sweep_id: str, index: int) -> JobSpec:
        """The job of a sweep's trial as this target marks it (Kubernetes: labels naming the sweep and trial)."""
        return job

    def queues_trials(self, job: JobSpec) -> bool:
        """Whether the engine itself keeps trials waiting for room (a Kueue queue): the driver then submits every
        trial at once instead of `parallel` at a time."""
        return False

    def waits(self, options: OptionsT) -> tuple[float | None, float] | None:
        """(timeout, poll) when these options ask submit to block until the run ends (SLURM's wait=true), else
        None. `submit` waits with `Run.wait` once the run is recorded: a run being waited for lists, and one
        whose wait times out or is interrupted stays known (`schedule` never waits)."""
        return None

    def creates_run(self, options: OptionsT) -> bool:
        """Whether `schedule` with these options leaves a run on the engine (False: a dry run; nothing is recorded)."""
        return True

    def cancel(self, run: RunRef) -> None:
        self.engine_for(run).cancel(run)

    def schedule_resumed(self, job: JobSpec, options: OptionsT, files: Path, subdir: str) -> tuple[RunRef, str]:
        """`--resume-from`: schedule the job with the checkpoint folder `files` placed under its new run's
        checkpoint location (+ `subdir`), where `checkpoint.resume: auto` finds it; (the run, that place).

        Here: place, then schedule, for a target whose checkpoint location is known before the run exists
        (local: resume.prepare gives it one). A target whose runs own their folder overrides it: the run
        is created first and started only once the checkpoint is in its folder (SLURM holds the job,
        SageMaker names the training job before creating it)."""
        placed = self.place_checkpoint(job, files, subdir)
        return self.schedule(job, options), placed

    def checkpoints_here(self, run: RunRef) -> Path | None:
        """A recorded run's checkpoint folder when it is on this machine (`--resume-from` reads it in place);
        None: it is not, and `fetch_checkpoints` copies them here."""
        return None

    def schedule_continuing(self, job: JobSpec, options: OptionsT, source: RunRef) -> tuple[RunRef, str] | None:
        """`--resume-from` a run whose checkpoints are already on this target's storage, where the new run's
        own processes can copy them (a Kubernetes run on the same PVC): schedule it so; (the run, where the
        checkpoints come from). None: they are not, and `schedule_resumed` gets a copy from this machine."""
        return None

    def place_checkpoint(self, job: JobSpec, files: Path, subdir: str) -> str:
        """Copy the folder `files` to `<the job's checkpoint location>/<subdir>` on this target, where
        `checkpoint.resume: auto` finds it; return that place (`--resume-from`)."""
        from .engine_contract import PlacesCheckpoint

        engine = self.engine()
        if isinstance(engine, PlacesCheckpoint):
            return engine.place_checkpoint(job, files, subdir)
        from .transfer import ResumeError

        raise ResumeError(
            f"--resume-from: the {self.name} target cannot receive a checkpoint yet; copy {files} by hand into "
            f"the job's checkpoint.dir{'/' + subdir if subdir else ''} on its storage and submit without "
            "--resume-from: checkpoint.resume: auto takes the newest"
        )

    def fetch_checkpoints(self, run: RunRef, dest: Path, accept: Accept | None = None) -> Fetched:
        """Copy a recorded run's checkpoints from this target's storage into the local folder `dest`
        (`--resume-from` a run whose checkpoints are not on this machine). With `accept`: its step-*
        folders newest first, one at a time, until `accept(folder)` is true (resume.fetch_newest); without
        (a command job's opaque folder): everything."""
        from .engine_contract import FetchesCheckpoints

        engine = self.engine_for(run)
        if isinstance(engine, FetchesCheckpoints):
            return engine.fetch_checkpoints(run, dest, accept)
        from .transfer import ResumeError

        raise ResumeError(
            f"--resume-from {run.id}: trainctl cannot fetch the checkpoints of a {self.name} run yet; copy its "
            "checkpoint folder to this machine, set checkpoint.dir to that folder and submit without "
            "--resume-from: checkpoint.resume: auto takes the newest"
        )

    def fetch_output(self, run: RunRef, dest: Path) -> Fetched:
        """Copy a recorded run's output folder (the final model, summary.json, metrics.jsonl, TensorBoard) from this
        target's storage into the local folder `dest` (`trainctl pull`, `Run.pull`)."""
        from .engine_contract import FetchesOutput

        engine = self.engine_for(run)
        if isinstance(engine, FetchesOutput):
            return engine.fetch_output(run, dest)
        from ..errors import EngineError

        raise EngineError(
            f"{run.id}: trainctl cannot copy a {self.name} run's output to this machine yet; it is at "
            f"{run.paths.output_dir or 'the job output folder'} on the target's storage"
        )

    def metrics(self, run: RunRef) -> list[dict[str, Any]]:
        """The run's metric rows (runs/curves.py): `engine.metrics(run)` where the target reads the trainer's
        metrics.jsonl (None: it cannot), else what the run's log says."""
        from .engine_contract import ReadsOutput

        engine = self.engine_for(run)
        found = engine.metrics(run) if isinstance(engine, ReadsOutput) else None
        if found is not None:
            return list(found)
        from ..runs.curves import from_log

        return from_log(self.logs(run))

    def summary(self, run: RunRef) -> dict[str, Any] | None:
        """The trainer's summary.json, where this target can read it (None: it cannot)."""
        from .engine_contract import ReadsOutput

        engine = self.engine_for(run)
        return engine.summary(run) if isinstance(engine, ReadsOutput) else None

    def function_results(self, run: RunRef) -> dict[str, bytes] | None:
        """A function job's results folder (function.RESULTS in the run's output location): file name -> bytes,
        where this target can read it (None: it cannot, or nothing was written)."""
        from .engine_contract import ReturnsResults

        engine = self.engine_for(run)
        return engine.function_results(run) if isinstance(engine, ReturnsResults) else None

"""The engine contract: what `Target` may ask a target's engine module, named once instead of probed by name.

Every engine has the three verbs of `Engine`; the rest are capabilities, one small protocol each, that an engine
has or lacks (`Target` falls back, or says what is missing, where it lacks one). They are `runtime_checkable`, so
`isinstance(engine, ReadsProgress)` asks a module whether it has the function (and mypy then knows its type). A
module without a capability simply does not define the function: no stub returning None.

| capability         | local | slurm | kubernetes | sagemaker (AWS) | sagemaker (local mode) |
|--------------------|-------|-------|------------|-----------------|------------------------|
| ReadsProgress      | yes   | yes   | yes        |                 | yes                    |
| ReadsOutput        | yes   | yes   |            |                 | yes                    |
| ReturnsResults     | yes   | yes   | yes        | yes             | yes                    |
| StatusOfMany       |       | yes   | yes        | yes             |                        |
| ProgressOfMany     |       | yes   |            |                 |                        |
| MetricsOfMany      |       | yes   |            |                 |                        |
| FetchesCheckpoints |       |       |            | yes             | yes                    |
| FetchesOutput      | yes   |       |            | yes             | yes                    |
| PlacesCheckpoint   |       |       |            |                 |                        |

(SLURM and Kubernetes copy checkpoints and output in their `Target`, over the run's shell or the cluster; the local,
SLURM and SageMaker targets place a resumed run's checkpoint in their `schedule_resumed`: `PlacesCheckpoint` is
for a plug-in's engine.) A SageMaker run's engine is picked per run (`Target.engine_for`).
`SchedulesArrays` is a target's, not an engine's: a target that runs a sweep's trials as one engine job.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

if TYPE_CHECKING:
    from pathlib import Path

    from ..runs.state import Progress, RunRef, RunStatus
    from ..spec.job_spec import JobSpec
    from .transfer import Accept, Fetched


@runtime_checkable
class Engine(Protocol):
    """What every engine does with a run it started."""

    def status(self, run: RunRef) -> RunStatus: ...

    def logs(self, run: RunRef, follow: bool = False) -> Iterator[str]: ...

    def cancel(self, run: RunRef) -> None: ...


@runtime_checkable
class ReadsProgress(Protocol):
    """The run's progress where the engine did not read it with the state (progress.py); None: none yet."""

    def progress(self, run: RunRef) -> Progress | None: ...


@runtime_checkable
class ReadsOutput(Protocol):
    """The trainer's files in the run's output folder; None where the run has none (a command job's log is read)."""

    def summary(self, run: RunRef) -> dict[str, Any] | None: ...

    def metrics(self, run: RunRef) -> list[dict[str, Any]] | None: ...


@runtime_checkable
class ReturnsResults(Protocol):
    """A function job's results folder (function.RESULTS): file name -> bytes; None: nothing was written."""

    def function_results(self, run: RunRef) -> dict[str, bytes] | None: ...


@runtime_checkable
class StatusOfMany(Protocol):
    """Many runs' states in as few engine calls as it allows; a run whose state cannot be read is left out."""

    def status_many(self, runs: Sequence[RunRef]) -> dict[str, RunStatus]: ...


@runtime_checkable
class ProgressOfMany(Protocol):
    """Many runs' progress in one call to the engine (SLURM: one call to the cluster for all)."""

    def progress_many(self, runs: Sequence[RunRef]) -> dict[str, Progress | None]: ...


@runtime_checkable
class MetricsOfMany(Protocol):
    """Many runs' metric rows in one call to the engine; a run it could not read is left out."""

    def metrics_many(self, runs: Sequence[RunRef]) -> dict[str, list[dict[str, Any]]]: ...


@runtime_checkable
class PlacesCheckpoint(Protocol):
    """`--resume-from`: copy a checkpoint folder to `<the job's checkpoint location>/<subdir>`; that place."""

    def place_checkpoint(self, job: JobSpec, files: Path, subdir: str) -> str: ...


@runtime_checkable
class FetchesCheckpoints(Protocol):
    """`--resume-from`: copy a run's checkpoints to this machine (with `accept`: newest step-* first)."""

    def fetch_checkpoints(self, run: RunRef, dest: Path, accept: Accept | None = None) -> Fetched: ...


@runtime_checkable
class FetchesOutput(Protocol):
    """`trainctl pull`: copy a run's output folder to this machine."""

    def fetch_output(self, run: RunRef, dest: Path) -> Fetched: ...


@runtime_checkable
class SchedulesArrays(Protocol):
    """A target that runs a sweep's trials as ONE engine job, at most `parallel` at once (a SLURM array), one run
    per trial; None where it cannot this time, and the sweep driver submits them P at a time."""

    def schedule_array(self, jobs: Sequence[JobSpec], options: Any, parallel: int, tag: str) -> list[RunRef] | None: ...

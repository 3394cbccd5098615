"""A submitted run on any target: one handle with status, logs, wait and cancel.

`Run` is a `RunRef` (runs/state.py: the run's record) plus the methods that act on it through its
target (targets/lookup.py) and keep the run store (runs/store.py) current.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from .errors import EngineError
from .runs import records as run_records
from .runs.state import RunRef, RunState, RunStatus
from .runs.store import RunStore, UnknownRunError
from .targets.lookup import get_target
from .targets.registry import handle_type, split_run_id

__all__ = ["LogLines", "Run", "RunFailed", "RunState", "RunStatus"]


class Run(RunRef):
    """Handle to a run: its record (paths, provenance, the target's own `handle`...) and what acts on it."""

    @classmethod
    def of(cls, ref: RunRef) -> Run:
        """The handle for a run an engine or the run store returned."""
        return ref if isinstance(ref, cls) else cls(**dict(ref))

    @classmethod
    def from_id(cls, run_id: str | None = None) -> Run:
        """The recorded run with this id (or a unique prefix of it; None: the newest run), or a bare handle for
        one submitted elsewhere (`<target>:<id>`)."""
        store = RunStore()
        run_id = store.resolve(run_id)
        target, native = split_run_id(run_id)
        found = store.get(run_id)
        if found is not None:
            return cls.of(found)
        return cls(target=target, native_id=native, handle=handle_type(target)())

    def status(self) -> RunStatus:
        """The state now, from the engine, saved as the run's last known state. A run no one recorded here that
        its engine does not know either is no run (UnknownRunError, exit 2), as `status local:nope` is."""
        status = run_records.explained(run_records.of_last_attempt(get_target(self.target).status(self)))
        if not RunStore().save_status(self.id, status) and status.state is RunState.UNKNOWN:
            raise UnknownRunError(
                f"{self.id}: no such run: it was not submitted from here (the run store has no record of it) and "
                f"the {self.target} engine does not know it ({status.reason or status.native_state}); "
                f"`trainctl list --target {self.target}` shows the runs submitted from here"
            )
        if status.state.finished and self.tracker_uri is not None:  # what no process of the job was left to say
            from .submit.trackers import settle

            settle(self, status.state is RunState.SUCCEEDED)
        return status

    def logs(self, follow: bool = False, rank: int | None = None) -> LogLines:
        """Log lines (without newlines), read as they are iterated; with follow, until the run ends; `rank`: one
        node rank's only, where the target keeps them apart (Kubernetes: one log per pod). `str()` of it is
        the whole log as text."""
        return LogLines(self, follow, rank)

    def cancel(self) -> None:
        get_target(self.target).cancel(self)

    def metrics(self, lineage: bool = True) -> list[dict[str, Any]]:
        """The run's metric rows (runs/curves.py), each naming its run; with `lineage`, preceded by the rows of the
        run it resumed from (`--resume-from`), up to the step it resumed at, and so on back: one curve."""
        from .runs.curves import along_lineage

        chain: list[tuple[str, list[dict[str, Any]], int | None]] = [
            (self.id, get_target(self.target).metrics(self), None)
        ]
        came, seen = self.resumed_from if lineage else None, {self.id}
        while came is not None and came.run not in seen:
            seen.add(came.run)
            source = Run.from_id(came.run)
            chain.insert(0, (source.id, get_target(source.target).metrics(source), came.step))
            came = source.resumed_from
        return along_lineage(chain)

    def plot(self, path: str | None = None, lineage: bool = True) -> Any:
        """A matplotlib Figure of the run's loss and validation curves (saved to `path` when given)."""
        from .runs.curves import plot

        return plot({self.id: self.metrics(lineage=lineage)}, path)

    def summary(self) -> dict[str, Any] | None:
        """The trainer's summary.json (accuracy, steps, checkpoint) where the target can read it."""
        return get_target(self.target).summary(self)

    def pull(self, dest: str | Path | None = None) -> Path:
        """Copy the run's output folder here: the final model (`model.safetensors` or `model.pt`, `model.json`),
        summary.json, metrics.jsonl and TensorBoard, from any target's storage. `dest`: an empty or new folder
        (default `./<target>-<engine id>`); returns it. A run with `output_dir: s3://...`: from that prefix."""
        from .errors import UsageError

        folder = Path(dest) if dest is not None else Path.cwd() / f"{self.target}-{self.native_id.replace('/', '-')}"
        if folder.exists() and (not folder.is_dir() or any(folder.iterdir())):
            raise UsageError([f"pull {self.id}: {folder} is not an empty folder; name a new one"])
        try:
            if self.paths.output_s3:  # output_dir: s3://...: the launcher's upload, whatever the target
                from .targets.s3_outputs import fetch

                fetch(self.paths.output_s3, folder)
            else:
                get_target(self.target).fetch_output(self, folder)
        except BaseException:
            if folder.is_dir() and not any(folder.iterdir()):
                folder.rmdir()
            raise
        return folder

    def wait(self, timeout: float | None = None, poll: float = 2.0, check: bool = False) -> RunStatus:
        """Block until the run finishes; raise EngineError on timeout. With `check` (as subprocess.run's), a run
        that did not succeed raises RunFailed naming its state and reason."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            status = self.status()
            if status.state.finished:
                if check and status.state is not RunState.SUCCEEDED:
                    raise RunFailed(self, status)
                return status
            if deadline is not None and time.monotonic() >= deadline:
                raise EngineError(f"{self.id} still {status.state.value} after {timeout:g}s")
            time.sleep(poll)

    def result(self, timeout: float | None = None, poll: float = 0.2) -> Any:
        """A function job's value on rank 0 (Job.with_function), once the run ends; see `results`."""
        return self.results(timeout, poll)[0]

    def results(self, timeout: float | None = None, poll: float = 0.2) -> list[Any]:
        """Every rank's value, by rank, once the run ends. A function that raised raises here: its own type where
        it unpickles (its remote traceback as `__cause__`), else a RemoteError; a run that ended without a
        result (cancelled, out of memory, a lost node, retries used up) raises RunFailed with its cause."""
        from .runs.results import first_error, outcomes

        status = self.wait(timeout=timeout, poll=poll)
        found = outcomes(get_target(self.target).function_results(self) or {})
        error = first_error(found)
        if error is not None:
            raise error
        if status.state is not RunState.SUCCEEDED or 0 not in found:
            raise RunFailed(self, status, "it ended without the function's result")
        return [found[rank].value for rank in sorted(found)]

    def _repr_html_(self) -> str:
        """Jupyter's display of a run: its state now, a progress bar, its last metrics, where its checkpoints,
        output and log are (runs/html.py)."""
        from .runs.html import run_html

        status = self.status()
        return run_html(self, status, self.summary() if status.state.finished else None)

    def __repr__(self) -> str:
        return f"Run(id={self.id!r}, job={self.job_name!r})"

    __str__ = __repr__  # pydantic's own __str__ would print every field: `print(run)` shows what repr shows


class RunFailed(EngineError):
    """`run.wait(check=True)` on a run that failed or was cancelled: its state, reason and log are named."""

    def __init__(self, run: Run, status: RunStatus, missing: str | None = None) -> None:
        self.run, self.status = run, status
        self.cause = status.attempts[-1].cause if status.attempts else None
        reason = f": {status.reason}" if status.reason else ""
        failure = status.failure
        if failure is not None and failure.kind == "error" and status.log_tail:
            reason += f"\n{run_records.tail_heading(failure)}:\n" + "\n".join(
                f"  {line}" for line in status.log_tail[-10:]
            )
        log = run.paths.log or status.log
        said = f" ({missing})" if missing else ""
        super().__init__(f"{run.id} {status.state.value}{reason}{said}", hint=f"its log: {log}" if log else None)


class LogLines(Iterable[str]):
    """A run's log lines, read from its target each time they are iterated (a generator's repr said nothing)."""

    def __init__(self, run: Run, follow: bool, rank: int | None) -> None:
        self.run, self.follow, self.rank = run, follow, rank

    def __iter__(self) -> Iterator[str]:
        yield from get_target(self.run.target).logs(self.run, follow=self.follow, rank=self.rank)

    def __str__(self) -> str:
        return "".join(line + "\n" for line in self)

    def __repr__(self) -> str:
        how = "followed to the run's end" if self.follow else "as they are now"
        rank = f", rank {self.rank}" if self.rank is not None else ""
        return f"<log lines of {self.run.id}{rank}, {how}: iterate them, or print(run.logs()) for the text>"

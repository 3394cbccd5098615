"""The failure verdict in a status is the last attempt's: an earlier attempt's failure.json, still in the
output folder that every attempt shares, does not make a retried run that succeeded (or runs again) read
as failed (issue 24: status after a successful retry)."""

from __future__ import annotations

from trainctl.runs.records import of_last_attempt
from trainctl.runs.state import Attempt, Failure, RunState, RunStatus

HANG = Failure(kind="hang", step=57, time=1000.0)


def _status(state: RunState, *starts: float) -> RunStatus:
    attempts = [Attempt(number=i + 1, engine_id=f"a{i}", started_at=t) for i, t in enumerate(starts)]
    return RunStatus(state=state, failure=HANG, attempts=attempts)


def test_a_run_that_succeeded_on_its_retry_shows_no_failure() -> None:
    assert of_last_attempt(_status(RunState.SUCCEEDED, 900.0, 1100.0)).failure is None
    assert of_last_attempt(_status(RunState.SUCCEEDED)).failure is None


def test_a_retry_that_runs_does_not_show_the_first_attempts_verdict() -> None:
    assert of_last_attempt(_status(RunState.RUNNING, 900.0, 1100.0)).failure is None


def test_the_last_attempts_own_verdict_stays() -> None:
    assert of_last_attempt(_status(RunState.FAILED, 900.0)).failure == HANG
    assert of_last_attempt(_status(RunState.FAILED, 900.0, 950.0)).failure == HANG  # the retry's verdict
    assert of_last_attempt(_status(RunState.FAILED)).failure == HANG  # no attempts known: kept
    no_time = RunStatus(
        state=RunState.FAILED, failure=Failure(kind="hang"), attempts=[Attempt(engine_id="a", started_at=1.0)]
    )
    assert of_last_attempt(no_time).failure is not None

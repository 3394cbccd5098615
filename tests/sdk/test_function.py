"""Job.with_function: bad input refused before anything is queued, what render shows, and on the local target a
function's value, its error, a run without a result and a Python/cloudpickle mismatch coming back as they should
(DDP with gloo across 2 processes is the notebook test's, tests/sdk/test_function_notebook.py)."""

from __future__ import annotations

import dataclasses
import hashlib
import os
import pickle
import sys
import threading
from pathlib import Path

import cloudpickle
import pytest
from trainctl import Job, RunFailed
from trainctl.errors import JobError
from trainctl.function import MAX_BYTES
from trainctl.runs.results import RemoteError

LOCK = threading.Lock()
cloudpickle.register_pickle_by_value(sys.modules[__name__])  # the test module does not travel: send it by value


class Unsendable(Exception):
    """An exception that carries a lock: it cannot be pickled to come back, so the caller gets a RemoteError."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.lock = threading.Lock()


def add(a: int, b: int = 1) -> int:
    return a + b


def digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def uses_lock() -> int:
    with LOCK:
        return 1


def fails_deep(n: int) -> int:
    if n > 0:
        return fails_deep(n - 1)
    raise KeyError(f"no shard {n}")


def fails_unsendable() -> None:
    raise Unsendable("held a lock")


def dies() -> None:
    os._exit(7)  # no result written: as an OOM kill or a lost node leaves it


def _job(**fields: object) -> Job:
    return Job(name="fn", **fields)  # type: ignore[arg-type]


def test_what_cannot_be_pickled_is_named_with_where_it_is_referenced(trainctl_home: Path, tmp_path: Path) -> None:
    with pytest.raises(JobError, match=r"global `LOCK` used by uses_lock\(\) \(lock\) cannot be pickled"):
        _job().with_function(uses_lock)
    handle = open(tmp_path / "log.txt", "w")  # noqa: SIM115  (open for writing: cloudpickle ships only readers)
    try:
        with pytest.raises(JobError, match=r"kwargs\['src'\] \(TextIOWrapper\) cannot be pickled"):
            _job().with_function(add, 1, src=handle)

        def closure() -> str:
            return handle.name

        with pytest.raises(JobError, match=r"`handle` in the closure of .*closure\(\) \(TextIOWrapper\)"):
            _job().with_function(closure)
    finally:
        handle.close()
    assert not (trainctl_home / "runs").exists() or not any((trainctl_home / "runs").iterdir())


def test_a_tensor_off_the_cpu_is_refused_naming_where_it_is(trainctl_home: Path) -> None:
    """A CUDA tensor would load only where CUDA is; a meta tensor (no data) is the one this machine can make."""
    import torch

    weights = torch.empty(3, device="meta")

    def scaled() -> float:
        return float(weights.sum())

    with pytest.raises(
        JobError, match=r"`weights` in the closure of .*scaled\(\) is a tensor on meta, .* \(\.cpu\(\)\)"
    ):
        _job().with_function(scaled)
    assert _job().with_function(add, torch.ones(2)).function is not None  # a CPU tensor travels


def test_a_payload_over_the_limit_points_at_data(trainctl_home: Path) -> None:
    with pytest.raises(JobError, match=r"over 20 MB: pass data through the job's `data:` inputs"):
        _job().with_function(add, b"x" * (MAX_BYTES + 1))
    assert not (trainctl_home / "runs").exists() or not any((trainctl_home / "runs").iterdir())


def test_a_job_without_a_program_is_refused_until_it_has_a_function() -> None:
    with pytest.raises(JobError, match=r"has no program: .* call job.with_function\(fn\)"):
        _job().render("local")
    rendered = _job().with_function(digest, "a").render("slurm")
    shipped = _job().with_function(digest, "a").function
    assert shipped is not None and shipped.sha256 == hashlib.sha256(shipped.payload).hexdigest()
    assert rendered.notes[-1].startswith(f"function: {__name__}.digest (")
    assert rendered.notes[-1].endswith(f"sha256 {shipped.sha256}; modules bound by reference: hashlib")
    assert "python -m trainer.function" in rendered.text and shipped.sha256 in rendered.text  # TRAINER_FUNCTION_SHA256


@pytest.mark.slow  # two local runs: 24 s in CI, 38 s on 2 loaded cores
def test_value_error_and_missing_result_on_local(tmp_path: Path) -> None:
    job = _job(resources={"procs_per_node": 1})
    run = job.with_function(add, 40, b=2).submit(target="local")
    assert run.result(timeout=120) == 42
    assert run.provenance is not None and run.provenance.function is not None
    assert run.provenance.function["sha256"] == job.with_function(add, 40, b=2).function.sha256  # type: ignore[union-attr]

    with pytest.raises(KeyError, match="no shard 0") as raised:
        job.with_function(fails_deep, 2).submit(target="local").result(timeout=120)
    remote = raised.value.remote_traceback  # type: ignore[attr-defined]
    assert remote.count("in fails_deep") == 3 and "KeyError: 'no shard 0'" in remote, remote

    with pytest.raises(RemoteError, match=r"rank 0 raised \S*test_function.Unsendable: held a lock") as unsent:
        job.with_function(fails_unsendable).submit(target="local").result(timeout=120)
    assert "in fails_unsendable" in unsent.value.remote_traceback

    with pytest.raises(RunFailed, match="without the function's result") as failed:
        job.with_function(dies).submit(target="local").result(timeout=120)
    assert failed.value.cause is not None and failed.value.status.exit_code == 7


def test_a_python_or_cloudpickle_mismatch_stops_before_any_process(tmp_path: Path) -> None:
    job = _job(resources={"procs_per_node": 2}).with_function(dies)
    assert job.function is not None
    other = dataclasses.replace(job.function, cloudpickle="0.1.0")
    run = job._with_private("_function", other).submit(target="local")
    with pytest.raises(RunFailed, match="without the function's result") as failed:
        run.result(timeout=120)
    log = str(run.logs())
    assert "pickled by Python" in log and "with cloudpickle 0.1.0, but this image has" in log, log
    assert failed.value.status.exit_code == 2 and failed.value.cause is not None
    assert failed.value.cause.value == "invalid"


def test_a_result_whose_digest_does_not_match_is_not_loaded(tmp_path: Path) -> None:
    from trainctl.errors import TrainctlError
    from trainctl.runs.results import outcomes

    pickled = pickle.dumps(5)
    entry = b'{"ok": true, "rank": 0, "sha256": "%s"}' % hashlib.sha256(pickled).hexdigest().encode()
    assert outcomes({"rank-0.json": entry, "rank-0.pkl": pickled})[0].value == 5
    with pytest.raises(TrainctlError, match="changed or cut short"):
        outcomes({"rank-0.json": entry, "rank-0.pkl": pickle.dumps(6)})


def test_map_runs_one_trial_per_item_and_returns_results_in_input_order(trainctl_home: Path) -> None:
    base = 10  # a lambda travels by value with map as with submit: cloudpickle pickles its code and closure
    mapped = (
        _job().with_function(lambda x, y=1: base * x + y, y=5).map([{"x": 1}, {"x": 2}, {"x": 3, "y": 0}], parallel=2)
    )
    assert mapped.results(timeout=180) == [15, 25, 30]
    assert [run.native_id for run in mapped.runs() if run] and len(mapped.runs()) == 3


def test_a_bad_map_item_queues_nothing(trainctl_home: Path) -> None:
    job = _job().with_function(add)
    with pytest.raises(JobError, match=r"items\[1\]\['b'\] \(lock\) cannot be pickled"):
        job.map([{"b": 1}, {"b": threading.Lock()}])
    with pytest.raises(JobError, match=r"item 0 is int; expected a dict of keyword arguments"):
        job.map([3])
    with pytest.raises(JobError, match=r"the job has no function"):
        _job(command=["python", "-c", "pass"]).map([{"b": 1}])
    assert not (trainctl_home / "sweeps").exists() and not (trainctl_home / "runs").exists()


def resumable() -> int:
    saved = Path(os.environ["TRAINER_CHECKPOINT_DIR"]) / "step.txt"
    if saved.exists():
        return int(saved.read_text()) + 1
    saved.parent.mkdir(parents=True, exist_ok=True)
    saved.write_text("41")
    raise RuntimeError("the first attempt dies after its checkpoint")


def test_a_retried_function_resumes_from_its_checkpoint_and_returns_the_last_attempts_value() -> None:
    run = _job(retries=1).with_function(resumable).submit(target="local")
    assert run.result(timeout=180) == 42  # not the first attempt's RuntimeError: that rank's result was replaced
    assert len(run.status().attempts) == 2


def test_a_function_from_a_module_goes_by_reference_and_travels_with_code(tmp_path: Path) -> None:
    folder = tmp_path / "src"
    folder.mkdir()
    (folder / "mathlib_fn36.py").write_text("def triple(x):\n    return 3 * x\n")
    sys.path.insert(0, str(folder))
    try:
        import mathlib_fn36  # type: ignore[import-not-found]

        job = _job(code=str(folder)).with_function(mathlib_fn36.triple, 5)
        assert job.render("local").notes[-1].endswith("modules bound by reference: mathlib_fn36")
        assert job.submit(target="local").result(timeout=120) == 15  # imported on the node from the unpacked code
    finally:
        sys.path.remove(str(folder))

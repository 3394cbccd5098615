"""Fixtures for the tests that submit runs (tests/sdk, tests/local: their conftest.py imports them): a private
TRAINCTL_HOME per test, digits data, job files, process checks."""

from __future__ import annotations

import contextlib
import shutil
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from types import SimpleNamespace

import procs  # tests/support (on sys.path through tests/conftest.py)
import psutil
import pytest
from digits import make_digits  # tests/support

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"
PY = sys.executable


@pytest.fixture(autouse=True)
def trainctl_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Every test gets its own state dir: no test sees another's runs or the user's real registry."""
    home = tmp_path / "trainctl-home"
    monkeypatch.setenv("TRAINCTL_HOME", str(home))
    return home


@pytest.fixture(scope="session")
def digits_data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_digits(tmp_path_factory.mktemp("digits-data") / "digits")


@pytest.fixture
def digits_job_file(tmp_path: Path, digits_data: Path) -> Path:
    """examples/digits.yaml, unchanged, in a folder whose data/digits is the generated data."""
    folder = tmp_path / "project"
    (folder / "data").mkdir(parents=True)
    (folder / "data" / "digits").symlink_to(digits_data)
    job_file = folder / "digits.yaml"
    shutil.copy(EXAMPLES / "digits.yaml", job_file)
    return job_file


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def of_run(run_dir: str) -> list[psutil.Process]:
    """Every live process whose environment names this run, read independently of trainctl's own code."""
    found = []
    for proc in psutil.process_iter(["environ", "status"], ad_value=None):
        env = proc.info["environ"] or {}
        if env.get("TRAINCTL_RUN_DIR") == run_dir and proc.info["status"] != psutil.STATUS_ZOMBIE:
            found.append(proc)
    return found


def wait_for(predicate: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.05)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}")


@pytest.fixture
def cleanup_runs() -> Iterator[list[object]]:
    """Runs a test started; any still going at the end are cancelled so no test leaks processes."""
    runs: list[object] = []
    yield runs
    for run in runs:
        with contextlib.suppress(Exception):  # best effort: the test itself reports what went wrong
            run.cancel()  # type: ignore[attr-defined]


@pytest.fixture
def helpers() -> SimpleNamespace:
    """The module's helper functions (test modules cannot import conftest under --import-mode=importlib)."""
    return SimpleNamespace(
        write=write,
        processes_mentioning=procs.mentioning,
        group_alive=procs.group_alive,
        wait_for=wait_for,
        root=ROOT,
        of_run=of_run,
    )

"""The SQLite run store: owner-only files, WAL, idempotent records, concurrent writers, fast listing."""

from __future__ import annotations

import sqlite3
import stat
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from trainctl import Job, Run, RunState
from trainctl.run_store import RunStore, state_dir


def make_run(i: int, target: str = "local", created: float | None = None) -> Run:
    return Run(
        target=target,
        native_id=f"run-{i:05d}",
        job_name=f"job-{i % 7}",
        meta={"log": f"/tmp/{i}.txt", "n": i},
        created_at=created if created is not None else 1_700_000_000.0 + i,
    )


def test_state_dir_and_files_are_owner_only(trainctl_home: Path) -> None:
    assert not trainctl_home.exists()
    reg = RunStore()
    reg.record(make_run(1))
    assert state_dir() == trainctl_home
    assert stat.S_IMODE(trainctl_home.stat().st_mode) == 0o700
    assert reg.path == trainctl_home / "runs.db"
    assert stat.S_IMODE(reg.path.stat().st_mode) == 0o600
    with sqlite3.connect(reg.path) as conn:
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"


def test_platformdirs_default_when_no_home(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv("TRAINCTL_HOME")
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "xdg"))
    assert state_dir() == tmp_path / "xdg" / "trainctl"


def test_record_get_update_and_idempotence() -> None:
    reg = RunStore()
    run = make_run(1)
    reg.record(run)
    reg.record(run)  # the same run again: still one row, state kept
    assert [r.id for r in reg.list()] == ["local:run-00001"]
    got = reg.get("local:run-00001")
    assert got == run and got is not run
    assert reg.update_state(run.id, RunState.RUNNING)
    reg.record(Run(target="local", native_id="run-00001", job_name="renamed", meta={"x": 1}, created_at=run.created_at))
    rec = reg.get_record(run.id)
    assert (
        rec is not None and rec.state is RunState.RUNNING and rec.run.job_name == "renamed" and rec.run.meta == {"x": 1}
    )
    assert not reg.update_state("local:nope", "failed")
    assert reg.get("local:nope") is None
    assert reg.delete(run.id) and reg.get(run.id) is None


def test_list_filters_and_orders_newest_first() -> None:
    reg = RunStore()
    for i in range(6):
        reg.record(make_run(i, target="local" if i % 2 else "slurm"), state="succeeded" if i < 3 else "queued")
    assert [r.run.native_id for r in reg.list()] == [f"run-{i:05d}" for i in (5, 4, 3, 2, 1, 0)]
    assert {r.run.target for r in reg.list(target="slurm")} == {"slurm"}
    assert [r.run.native_id for r in reg.list(state="queued", limit=2)] == ["run-00005", "run-00004"]
    assert reg.list()[0].to_dict()["meta"] == {"log": "/tmp/5.txt", "n": 5}


def test_unknown_state_in_the_file_reads_as_unknown() -> None:
    reg = RunStore()
    reg.record(make_run(1))
    with sqlite3.connect(reg.path) as conn:
        conn.execute("UPDATE runs SET state = 'weird', meta = 'not json'")
    rec = reg.get_record("local:run-00001")
    assert rec is not None and rec.state is RunState.UNKNOWN and rec.run.meta == {}


def test_concurrent_threads_record_and_update() -> None:
    errors: list[BaseException] = []

    def work(offset: int) -> None:
        try:
            reg = RunStore()
            for i in range(offset, offset + 40):
                reg.record(make_run(i))
                reg.record(make_run(i))
                reg.update_state(f"local:run-{i:05d}", "running")
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(k * 40,)) for k in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    records = RunStore().list()
    assert len(records) == 240 and {r.state for r in records} == {RunState.RUNNING}


def test_concurrent_processes_record_the_same_and_different_runs(trainctl_home: Path) -> None:
    code = (
        "import sys\n"
        "from trainctl.run_store import RunStore\n"
        "from trainctl.run import Run\n"
        "k = int(sys.argv[1]); reg = RunStore()\n"
        "for i in range(50):\n"
        "    reg.record(Run(target='local', native_id=f'p{k}-{i}', created_at=float(i)))\n"
        "    reg.record(Run(target='local', native_id=f'shared-{i}', created_at=float(i)))\n"
        "    reg.update_state(f'local:shared-{i}', 'running')\n"
    )
    procs = [subprocess.Popen([sys.executable, "-c", code, str(k)]) for k in range(4)]
    assert [p.wait(60) for p in procs] == [0, 0, 0, 0]
    records = RunStore().list()
    assert len(records) == 4 * 50 + 50
    assert len({r.id for r in records}) == len(records)


def test_list_of_ten_thousand_runs_is_fast_and_uses_the_index() -> None:
    reg = RunStore()
    reg.record(make_run(0))
    rows = [
        (f"local:bulk-{i}", "local", f"bulk-{i}", "bulk", "succeeded", 1_600_000_000.0 + i, 0.0, "{}")
        for i in range(10_000)
    ]
    with sqlite3.connect(reg.path) as conn:
        conn.executemany("INSERT INTO runs VALUES (?, ?, ?, ?, ?, ?, ?, ?)", rows)
        plan = " ".join(
            str(r) for r in conn.execute("EXPLAIN QUERY PLAN SELECT id FROM runs ORDER BY created_at DESC LIMIT 50")
        )
    assert "runs_created_at" in plan
    started = time.perf_counter()
    newest = reg.list(limit=50)
    everything = reg.list()
    elapsed = time.perf_counter() - started
    assert len(newest) == 50 and len(everything) == 10_001
    assert elapsed < 2.0, f"listing 10,000 runs took {elapsed:.2f}s"


def test_submitted_run_meta_holds_no_secret_values(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    secrets = tmp_path / "trainctl-home" / "secrets"
    secrets.mkdir(parents=True)
    (secrets / "api-token").write_text("hunter2-very-secret\n")
    job = Job.parse(
        {
            "name": "sec",
            "command": [sys.executable, "-c", "import os; print(len(os.environ['API_TOKEN']))"],
            "secrets": [{"env": "API_TOKEN", "name": "api-token"}],
        }
    )
    run = job.submit("local")
    run.wait(timeout=60, poll=0.2)
    db_bytes = b"".join(p.read_bytes() for p in (tmp_path / "trainctl-home").glob("runs.db*"))
    assert b"hunter2" not in db_bytes
    run_dir = Path(run.meta["run_dir"])
    assert all(b"hunter2" not in p.read_bytes() for p in run_dir.iterdir() if p.is_file() and p.name != "log.txt")
    assert "[rank0] 19" in list(run.logs())  # the job saw the value (its length) through the environment

"""The run store: one small SQLite file in the user's state dir, so `trainctl list` spans every target.

WAL mode and a busy timeout make it safe for many writers (threads and processes); `record` is
idempotent per run id. A row is a run's record (run_state.RunRef, as JSON: never a secret value, a job
carries only secret names) and its last known state. Rows written before records were typed (one flat
`meta` dict per run) are migrated when the file is first opened (`migrate_meta`, PRAGMA user_version 1).
"""

from __future__ import annotations

import contextlib
import json
import os
import sqlite3
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import TrainctlError
from ..targets.registry import handle_type
from .state import Progress, RunRef, RunState, RunStatus

HOME_ENV = "TRAINCTL_HOME"
_SCHEMA = """
CREATE TABLE IF NOT EXISTS runs (
    id TEXT PRIMARY KEY,
    target TEXT NOT NULL,
    native_id TEXT NOT NULL,
    job_name TEXT NOT NULL DEFAULT '',
    state TEXT NOT NULL DEFAULT 'queued',
    created_at REAL NOT NULL,
    updated_at REAL NOT NULL,
    meta TEXT NOT NULL DEFAULT '{}',
    record TEXT NOT NULL DEFAULT ''
);
CREATE INDEX IF NOT EXISTS runs_created_at ON runs (created_at);
"""
SCHEMA_VERSION = 1
"""0: `meta` held a flat dict per run; 1: `record` holds the typed record (meta is left '{}')."""


class RunStoreError(TrainctlError):
    """The run store's file cannot be opened or written (permissions, a broken file)."""

    exit_code = 1


class UnknownRunError(TrainctlError):
    """No run with this id is known here: the caller gave a wrong id. Exit code 2."""

    exit_code = 2


def state_dir() -> Path:
    """`$TRAINCTL_HOME`, else the platform's user state dir; created owner-only (0700)."""
    env = os.environ.get(HOME_ENV)
    if env:
        path = Path(env).expanduser()
    else:
        from platformdirs import user_state_dir

        path = Path(user_state_dir("trainctl"))
    if not path.is_dir():
        path.mkdir(mode=0o700, parents=True, exist_ok=True)
    return path


@dataclass(frozen=True)
class RunRecord:
    """One row of the store: the run plus its last known state."""

    run: RunRef
    state: RunState
    updated_at: float

    @property
    def id(self) -> str:
        return self.run.id

    def to_dict(self) -> dict[str, Any]:
        """The record, its last known state and when that was read (`trainctl list --output json`)."""
        return {**self.run.record(), "state": self.state.value, "updated_at": self.updated_at}


class RunStore:
    """SQLite-backed record of submitted runs; one short connection per call, so it is fork- and thread-safe."""

    def __init__(self, path: Path | str | None = None) -> None:
        self.path = Path(path) if path is not None else state_dir() / "runs.db"
        self._ready = False

    @contextmanager
    def _connect(self) -> Iterator[sqlite3.Connection]:
        if not self._ready:
            self._create()
        try:
            conn = sqlite3.connect(self.path, timeout=30.0, isolation_level=None)
        except sqlite3.Error as exc:
            raise RunStoreError(f"cannot open the run store {self.path}: {exc}") from None
        try:
            conn.execute("PRAGMA busy_timeout = 30000")
            conn.execute("PRAGMA synchronous = NORMAL")  # WAL + NORMAL: consistent, no fsync per commit
            yield conn
        except sqlite3.Error as exc:
            raise RunStoreError(f"run store {self.path}: {exc}") from None
        finally:
            conn.close()

    def _create(self) -> None:
        """Create the file owner-only before SQLite opens it, switch it to WAL, add the table."""
        import fcntl

        self.path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        try:
            # One creator at a time (threads and processes): the file, the WAL switch and the schema
            # are done once, before any connection of this process can hold a lock on the file.
            lock = os.open(self.path.with_name(self.path.name + ".lock"), os.O_CREAT | os.O_RDWR, 0o600)
            try:
                fcntl.flock(lock, fcntl.LOCK_EX)
                if not self.path.exists():
                    # Only ever open+close a file nobody has open: closing any descriptor of the
                    # database drops every POSIX lock this process holds on it, under other
                    # threads' live connections ("database disk image is malformed").
                    with contextlib.suppress(FileExistsError):
                        os.close(os.open(self.path, os.O_CREAT | os.O_EXCL | os.O_RDWR, 0o600))
                conn = sqlite3.connect(self.path, timeout=30.0, isolation_level=None)
                try:
                    conn.execute("PRAGMA busy_timeout = 30000")
                    if conn.execute("PRAGMA journal_mode").fetchone()[0] != "wal":
                        conn.execute("PRAGMA journal_mode = WAL")
                    conn.executescript(_SCHEMA)
                    if conn.execute("PRAGMA user_version").fetchone()[0] < SCHEMA_VERSION:
                        _migrate(conn)
                finally:
                    conn.close()
            finally:
                os.close(lock)
        except (OSError, sqlite3.Error) as exc:
            raise RunStoreError(f"cannot create the run store {self.path}: {exc}") from None
        self._ready = True

    def record(self, run: RunRef, state: RunState | str = "queued") -> None:
        """Insert the run, or refresh its name and meta if it is already there (idempotent)."""
        value = RunState(state).value
        now = time.time()
        record = run.model_dump_json()
        with self._connect() as conn:
            conn.execute(
                "INSERT INTO runs (id, target, native_id, job_name, state, created_at, updated_at, record) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, ?) "
                "ON CONFLICT(id) DO UPDATE SET job_name = excluded.job_name, record = excluded.record, "
                "updated_at = excluded.updated_at",
                (run.id, run.target, run.native_id, run.job_name, value, run.created_at, now, record),
            )

    def update_state(self, run_id: str, state: RunState | str, progress: Progress | None = None) -> bool:
        """Set the last known state (and progress, when one was read); False when the run is not recorded here."""
        with self._connect() as conn:
            return _update_state(conn, run_id, state, progress)

    def save_status(self, run_id: str, status: RunStatus) -> bool:
        """The state and progress a status read, and once the run ended, when (the first time seen stays) and
        why, for `trainctl list`'s DURATION and REASON; False when the run is not recorded here."""
        with self._connect() as conn:
            return _save_status(conn, run_id, status)

    def save_statuses(self, statuses: dict[str, RunStatus]) -> None:
        """Many runs' `save_status` in one transaction: a sweep of 1,000 trials made 1,000 commits, 6 s
        of its `sweep status` (docs/scale.md)."""
        with self._connect() as conn:
            conn.execute("BEGIN IMMEDIATE")
            try:
                for run_id, status in statuses.items():
                    _save_status(conn, run_id, status)
            except BaseException:
                conn.execute("ROLLBACK")
                raise
            conn.execute("COMMIT")

    def get(self, run_id: str) -> RunRef | None:
        found = self.get_record(run_id)
        return found.run if found else None

    def get_record(self, run_id: str) -> RunRecord | None:
        with self._connect() as conn:
            row = conn.execute(f"SELECT {_COLUMNS} FROM runs WHERE id = ?", (run_id,)).fetchone()
        return _record(row) if row else None

    def resolve(self, given: str | None) -> str:
        """The full id of a recorded run, as `gh` and `docker` take one: None means the newest run; a whole id; or
        a unique prefix of a local id (`local:20261121-12`, or bare: `20261121-12`) or, bare, of any run's id or
        its engine's id (`42` for slurm:42). Another `<target>:<id>` is taken as it is (it may have been submitted
        elsewhere)."""
        if given is None:
            newest = self.list(limit=1)
            if not newest:
                raise UnknownRunError("no runs yet, so there is no newest run; submit one with: trainctl submit JOB")
            return newest[0].id
        if ":" in given and not given.startswith("local:"):
            return given  # `slurm:4` is that job, recorded or not, never a prefix of slurm:42
        with self._connect() as conn:
            if conn.execute("SELECT 1 FROM runs WHERE id = ?", (given,)).fetchone():
                return given
            sql = (
                "SELECT id FROM runs WHERE substr(id, 1, ?) = ? OR substr(native_id, 1, ?) = ? ORDER BY created_at DESC"
            )
            found = [row[0] for row in conn.execute(sql, (len(given), given, len(given), given)).fetchall()]
        if len(found) == 1:
            return str(found[0])
        if len(found) > 1:
            shown = ", ".join(found[:5]) + (f" and {len(found) - 5} more" if len(found) > 5 else "")
            raise UnknownRunError(
                f"run id {given!r} is ambiguous: it starts {len(found)} runs ({shown}); give more of it"
            )
        if ":" in given:
            return given
        raise UnknownRunError(
            f"run id {given!r}: no recorded run's id starts so; give <target>:<id> or a unique prefix of a recorded "
            "one (`trainctl list` shows them)"
        )

    def list(self, target: str | None = None, state: str | None = None, limit: int | None = None) -> list[RunRecord]:
        """Newest first, optionally filtered by target and state."""
        where: list[str] = []
        args: list[Any] = []
        if target:
            where.append("target = ?")
            args.append(target)
        if state:
            where.append("state = ?")
            args.append(state)
        sql = f"SELECT {_COLUMNS} FROM runs"
        if where:
            sql += " WHERE " + " AND ".join(where)
        sql += " ORDER BY created_at DESC, id DESC"
        if limit is not None:
            sql += " LIMIT ?"
            args.append(int(limit))
        with self._connect() as conn:
            rows = conn.execute(sql, args).fetchall()
        return [_record(row) for row in rows]

    def delete(self, run_id: str) -> bool:
        with self._connect() as conn:
            return conn.execute("DELETE FROM runs WHERE id = ?", (run_id,)).rowcount > 0


_COLUMNS = "id, target, native_id, job_name, state, created_at, updated_at, record"


def _update_state(conn: sqlite3.Connection, run_id: str, state: RunState | str, progress: Progress | None) -> bool:
    found = progress.model_dump_json() if progress is not None else None
    cur = conn.execute(
        "UPDATE runs SET state = ?, updated_at = ?, record = CASE WHEN ? IS NULL THEN record "
        "ELSE json_set(coalesce(record, '{}'), '$.progress', json(?)) END WHERE id = ?",
        (RunState(state).value, time.time(), found, found, run_id),
    )
    return cur.rowcount > 0


def _save_status(conn: sqlite3.Connection, run_id: str, status: RunStatus) -> bool:
    if not _update_state(conn, run_id, status.state, status.progress):
        return False
    ended = status.ended_at()
    if ended is not None:
        conn.execute(
            "UPDATE runs SET record = json_set(coalesce(record, '{}'), '$.finished_at', "
            "coalesce(json_extract(record, '$.finished_at'), ?), '$.reason', ?) WHERE id = ?",
            (ended, status.reason, run_id),
        )
    return True


def _record(row: tuple[Any, ...]) -> RunRecord:
    _id, target, native_id, job_name, state, created_at, updated_at, record = row
    try:
        data = json.loads(record) if record else {}
    except ValueError:
        data = {}
    try:
        run_state = RunState(state)
    except ValueError:
        run_state = RunState.UNKNOWN
    data.update(target=target, native_id=native_id, job_name=job_name, created_at=created_at)
    data["handle"] = handle_type(target).model_validate(data.get("handle") or {})
    try:
        run = RunRef.model_validate(data)
    except ValueError:  # a record this trainctl cannot read: the row still lists, with what the columns say
        run = RunRef(target=target, native_id=native_id, job_name=job_name, created_at=created_at)
    return RunRecord(run=run, state=run_state, updated_at=updated_at)


def migrate_meta(target: str, meta: dict[str, Any]) -> dict[str, Any]:
    """A record's fields from a row's flat `meta` dict (before records were typed): the keys every target
    shared become their typed fields, the rest the target's handle (`RunHandle.from_meta`)."""
    meta = dict(meta)
    paths = {k: meta.pop(k) for k in ("run_dir", "work_dir", "checkpoint_dir", "output_dir", "log") if k in meta}
    if "checkpoint_s3_uri" in meta:  # a SageMaker training job's checkpoint prefix
        paths["checkpoint_dir"] = meta.pop("checkpoint_s3_uri")
    record: dict[str, Any] = {"paths": paths}
    for key in ("provenance", "resumed_from"):
        value = meta.pop(key, None)
        if isinstance(value, dict):
            record[key] = value
    record["handle"] = handle_type(target).from_meta(meta).model_dump(mode="json")
    return record


def _migrate(conn: sqlite3.Connection) -> None:
    """Schema 0 -> 1, in one transaction: a `record` column, filled from each row's `meta`."""
    conn.execute("BEGIN IMMEDIATE")
    try:
        columns = {row[1] for row in conn.execute("PRAGMA table_info(runs)")}
        if "record" not in columns:
            conn.execute("ALTER TABLE runs ADD COLUMN record TEXT NOT NULL DEFAULT ''")
        rows = conn.execute("SELECT id, target, meta FROM runs WHERE record = ''").fetchall()
        for run_id, target, meta in rows:
            try:
                found = json.loads(meta)
            except ValueError:
                found = {}
            record = migrate_meta(target, found if isinstance(found, dict) else {})
            conn.execute("UPDATE runs SET record = ?, meta = '{}' WHERE id = ?", (json.dumps(record), run_id))
        conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
        conn.execute("COMMIT")
    except BaseException:
        conn.execute("ROLLBACK")
        raise

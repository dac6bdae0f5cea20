"""The studio's state: runs, their commands, attempts and events, in SQLite under the root
(``<root>/.wenxin-studio/studio.db``).

Two kinds of process write it: the studio (launch, stop, delete, scheduling) and each run's keeper
(``wenxin.studio.keeper``: attempts, exits, restarts). SQLite's write-ahead log lets them share
the file; every write is one short transaction, and a writer waits for another's (``timeout``)
instead of failing. The state survives the studio's restart and a reboot: the studio reads it
back on start and re-attaches to the runs still alive.
"""
from __future__ import annotations

import contextlib
import json
import os
import sqlite3
import time
from typing import Any, Dict, Iterator, List, Optional, Sequence, Tuple, Union

from wenxin.studio.i18n import Notice, notice

STATE_DIR = ".wenxin-studio"
RUNS_DIR = "studio_runs"
LOG_NAME = "console.log"  # a run's output, in its folder (its keeper appends each start's)

# A run's life: queued -> running (-> restarting -> running)* -> finished | failed | stopped.
# "interrupted": its keeper died with it (a reboot, the studio's machine killed); the studio
# queues it again on start and the run continues from its checkpoint.
QUEUED, RUNNING, RESTARTING, FINISHED, FAILED, STOPPED, INTERRUPTED = (
    "queued", "running", "restarting", "finished", "failed", "stopped", "interrupted")
ACTIVE = (RUNNING, RESTARTING)
ENDED = (FINISHED, FAILED, STOPPED)

_SCHEMA = """
CREATE TABLE IF NOT EXISTS runs (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    name TEXT NOT NULL,
    kind TEXT NOT NULL,              -- train | sweep
    task_path TEXT NOT NULL,         -- relative to the root
    sweep_path TEXT NOT NULL DEFAULT '',
    overrides TEXT NOT NULL,         -- JSON: {key path: value}
    command TEXT NOT NULL,           -- JSON: the argument list (no shell ever sees it)
    folder TEXT NOT NULL,            -- relative to the root
    status TEXT NOT NULL,
    cause TEXT NOT NULL DEFAULT '',  -- why it failed, stopped or was restarted last
    restarts INTEGER NOT NULL DEFAULT 0,
    restart_budget INTEGER NOT NULL,
    restart_backoff TEXT NOT NULL DEFAULT '[10, 30, 60]',  -- JSON: seconds before the 1st, 2nd, ... restart
    restart_at REAL,                 -- a restart waits until then (shown on its page)
    attempt_started REAL,            -- when its current process started (records before it are stale)
    cpu_seconds REAL,                -- CPU time of its processes that have ended (user and system)
    stop_requested INTEGER NOT NULL DEFAULT 0,
    keeper_pid INTEGER,
    keeper_started REAL,             -- the keeper's process start time (a pid can be reused)
    train_pid INTEGER,
    created REAL NOT NULL,
    started REAL,
    ended REAL
);
CREATE TABLE IF NOT EXISTS events (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    run_id INTEGER NOT NULL,
    time REAL NOT NULL,
    kind TEXT NOT NULL,              -- queued | started | restarted | finished | failed | stopped | interrupted ...
    message TEXT NOT NULL,           -- in English, as the log says it
    notice TEXT                      -- JSON: the message as a key and values (i18n.Notice), for the page's language
);
CREATE INDEX IF NOT EXISTS events_by_run ON events (run_id, id);
"""
# columns added since the first studio: (table, name, declaration), added to an older database on open
_ADDED_COLUMNS = (("runs", "restart_backoff", "TEXT NOT NULL DEFAULT '[10, 30, 60]'"), ("runs", "restart_at", "REAL"),
                  ("runs", "attempt_started", "REAL"), ("runs", "cpu_seconds", "REAL"),
                  ("runs", "cause_notice", "TEXT"), ("events", "notice", "TEXT"))
DEFAULT_BACKOFF = (10.0, 30.0, 60.0)


def backoff_delay(backoff: List[float], restart: int) -> float:
    """Seconds before restart number ``restart`` (1, 2, ...): the backoff's entry, its last one
    for every restart past it."""
    return float(backoff[min(restart, len(backoff)) - 1]) if backoff and restart > 0 else 0.0


def _columns(message: Union[str, Notice]) -> Tuple[str, Optional[str]]:
    """A message's two columns: its English, and (a notice) its key and values as JSON."""
    if isinstance(message, Notice):
        return message.english(), json.dumps(message.as_json(), ensure_ascii=False)
    return message, None


def database_path(root: str) -> str:
    return os.path.join(root, STATE_DIR, "studio.db")


class Store:
    """The studio's SQLite database; each method is one transaction."""

    def __init__(self, path: str) -> None:
        self.path = path
        os.makedirs(os.path.dirname(path), exist_ok=True)
        db = sqlite3.connect(self.path, timeout=60.0, isolation_level=None)
        try:
            db.execute("PRAGMA journal_mode=WAL")  # outside a transaction, as SQLite wants
            db.executescript(_SCHEMA)
            for table, name, declaration in _ADDED_COLUMNS:
                have = {row[1] for row in db.execute(f"PRAGMA table_info({table})")}
                if name not in have:
                    db.execute(f"ALTER TABLE {table} ADD COLUMN {name} {declaration}")
        finally:
            db.close()

    @contextlib.contextmanager
    def _connect(self) -> Iterator[sqlite3.Connection]:
        db = sqlite3.connect(self.path, timeout=60.0, isolation_level=None)
        db.row_factory = sqlite3.Row
        try:
            db.execute("BEGIN IMMEDIATE")
            yield db
            db.execute("COMMIT")
        except BaseException:
            if db.in_transaction:
                db.execute("ROLLBACK")
            raise
        finally:
            db.close()

    @staticmethod
    def _run(row: sqlite3.Row) -> Dict[str, Any]:
        run = dict(row)
        run["overrides"] = json.loads(run["overrides"])
        run["command"] = json.loads(run["command"])
        run["restart_backoff"] = json.loads(run["restart_backoff"])
        run["cause_notice"] = json.loads(run["cause_notice"]) if run.get("cause_notice") else None
        return run

    def add_run(self, *, name: str, kind: str, task_path: str, sweep_path: str, overrides: Dict[str, Any],
                command: List[str], folder: str, restart_budget: int,
                restart_backoff: Sequence[float] = DEFAULT_BACKOFF) -> int:
        with self._connect() as db:
            cursor = db.execute(
                "INSERT INTO runs (name, kind, task_path, sweep_path, overrides, command, folder, status, "
                "restart_budget, restart_backoff, created) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (name, kind, task_path, sweep_path, json.dumps(overrides), json.dumps(command), folder, QUEUED,
                 restart_budget, json.dumps(list(restart_backoff)), time.time()))
            run_id = int(cursor.lastrowid or 0)
            self._add_event(db, run_id, QUEUED, notice("notice.queued"))
        return run_id

    def set_folder_and_command(self, run_id: int, folder: str, command: List[str]) -> None:
        with self._connect() as db:
            db.execute("UPDATE runs SET folder = ?, command = ? WHERE id = ?", (folder, json.dumps(command), run_id))

    def run(self, run_id: int) -> Optional[Dict[str, Any]]:
        with self._connect() as db:
            row = db.execute("SELECT * FROM runs WHERE id = ?", (run_id,)).fetchone()
        return self._run(row) if row else None

    def runs(self) -> List[Dict[str, Any]]:
        with self._connect() as db:
            rows = db.execute("SELECT * FROM runs ORDER BY id DESC").fetchall()
        return [self._run(row) for row in rows]

    def events(self, run_id: int) -> List[Dict[str, Any]]:
        with self._connect() as db:
            rows = db.execute("SELECT time, kind, message, notice FROM events WHERE run_id = ? ORDER BY id",
                              (run_id,)).fetchall()
        return [{**dict(row), "notice": json.loads(row["notice"]) if row["notice"] else None} for row in rows]

    def update(self, run_id: int, event: Optional[str] = None, message: Union[str, Notice] = "",
               **fields: Any) -> None:
        """Set ``fields`` of the run and, with ``event``, record it (its kind and message). A
        :class:`Notice` (the message, or the ``cause`` field) is kept in English and as its key
        and values, so that the page can say it in its reader's language."""
        if "cause" in fields:
            fields["cause"], fields["cause_notice"] = _columns(fields["cause"])
        with self._connect() as db:
            if fields:
                names = ", ".join(f"{name} = ?" for name in fields)
                db.execute(f"UPDATE runs SET {names} WHERE id = ?", (*fields.values(), run_id))  # noqa: S608 (names are ours)
            if event:
                self._add_event(db, run_id, event, message or event)

    @staticmethod
    def _add_event(db: sqlite3.Connection, run_id: int, kind: str, message: Union[str, Notice]) -> None:
        english, kept = _columns(message)
        db.execute("INSERT INTO events (run_id, time, kind, message, notice) VALUES (?, ?, ?, ?, ?)",
                   (run_id, time.time(), kind, english, kept))

    def claim_queued(self, run_id: int) -> bool:
        """Mark a queued run as running, before its keeper starts; False when it is no longer
        queued (stopped or deleted meanwhile) or waits for its restart time."""
        with self._connect() as db:
            cursor = db.execute(
                "UPDATE runs SET status = ?, keeper_pid = NULL, keeper_started = NULL, started = COALESCE(started, ?), "
                "stop_requested = 0, ended = NULL, restart_at = NULL WHERE id = ? AND status = ? "
                "AND (restart_at IS NULL OR restart_at <= ?)",
                (RUNNING, time.time(), run_id, QUEUED, time.time()))
            return cursor.rowcount == 1

    def delete(self, run_id: int) -> None:
        with self._connect() as db:
            db.execute("DELETE FROM events WHERE run_id = ?", (run_id,))
            db.execute("DELETE FROM runs WHERE id = ?", (run_id,))

"""The Darshan import state (``iez learn --darshan-dir``): which logs were read, what they held, which groups wait.

A local SQLite file, not the interaction DB: it belongs to the one importer
that walks a log tree, and lets a pass restart anywhere without reading a log
twice (:mod:`iez.predict.darshan_dir` has the rules). Each write commits with
what it must commit together.
"""

from __future__ import annotations

import json
import sqlite3
import time
from pathlib import Path

_SCHEMA = """
CREATE TABLE IF NOT EXISTS logs (
    path TEXT PRIMARY KEY, size INTEGER NOT NULL, mtime_ns INTEGER NOT NULL,
    status TEXT NOT NULL, detail TEXT, app TEXT, user TEXT, jobid TEXT, start_key REAL,
    requests TEXT, imported_at REAL NOT NULL);
CREATE INDEX IF NOT EXISTS logs_group ON logs (app, user);
CREATE TABLE IF NOT EXISTS pending (app TEXT NOT NULL, user TEXT NOT NULL, PRIMARY KEY (app, user));
"""


def open_state(path: Path) -> sqlite3.Connection:
    """The state at ``path``, created (with its directory) when missing."""
    path.parent.mkdir(parents=True, exist_ok=True)
    conn = sqlite3.connect(path, timeout=60)
    conn.executescript(_SCHEMA)
    return conn


def known_logs(conn: sqlite3.Connection) -> dict[str, tuple[int, int]]:
    """Every recorded log's ``(size, mtime_ns)``, by path, whatever its outcome."""
    return {p: (s, m) for p, s, m in conn.execute("SELECT path, size, mtime_ns FROM logs")}


def record_corrupt(conn: sqlite3.Connection, path: str, size: int, mtime_ns: int, detail: str) -> None:
    """Record a log that could not be read (never retried while its size and time stay)."""
    conn.execute("INSERT OR REPLACE INTO logs (path, size, mtime_ns, status, detail, imported_at) "
                 "VALUES (?, ?, ?, 'corrupt', ?, ?)", (path, size, mtime_ns, detail[:1000], time.time()))
    conn.commit()


def record_imported(conn: sqlite3.Connection, path: str, size: int, mtime_ns: int, app: str, user: str, jobid: str,
                    start: float, requests: list) -> None:
    """Record an imported log with its requests, and mark its group pending, in one transaction."""
    with conn:
        conn.execute("INSERT OR REPLACE INTO logs (path, size, mtime_ns, status, app, user, jobid, start_key, "
                     "requests, imported_at) VALUES (?, ?, ?, 'ok', ?, ?, ?, ?, ?, ?)",
                     (path, size, mtime_ns, app, user, jobid, start, json.dumps(requests), time.time()))
        conn.execute("INSERT OR IGNORE INTO pending (app, user) VALUES (?, ?)", (app, user))


def group_logs(conn: sqlite3.Connection, app: str, user: str) -> list[tuple[str, str | None, list]]:
    """``(path, jobid, requests)`` of the group's imported logs, in run order (start, import time, path)."""
    rows = conn.execute("SELECT path, jobid, requests FROM logs WHERE status = 'ok' AND app = ? AND user = ? "
                        "ORDER BY start_key, imported_at, path", (app, user)).fetchall()
    return [(path, jobid, json.loads(requests)) for path, jobid, requests in rows]


def pending_groups(conn: sqlite3.Connection) -> list[tuple[str, str]]:
    """The ``(app, user)`` groups that got a log since they were last predicted."""
    return conn.execute("SELECT app, user FROM pending ORDER BY app, user").fetchall()


def group_done(conn: sqlite3.Connection, app: str, user: str) -> None:
    """The group is predicted: no longer pending."""
    with conn:
        conn.execute("DELETE FROM pending WHERE app = ? AND user = ?", (app, user))

"""The background stager's journal (``$IEZ_STATE_DIR/staging.db``): movements, their files, and each file's state.

A local SQLite file in WAL mode with full sync, not the interaction DB: it
belongs to one state directory's stager, and a file is marked done in the same
transaction that counts its bytes, so a kill or a power cut at any moment loses
nothing (:mod:`iez.move.staging` has the rules and the fair queuing).
"""

from __future__ import annotations

import sqlite3
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator, Sequence

SCHEMA = """
CREATE TABLE IF NOT EXISTS movements (
    id INTEGER PRIMARY KEY AUTOINCREMENT, created REAL NOT NULL, sources TEXT NOT NULL, dst TEXT NOT NULL,
    weight REAL NOT NULL, share REAL NOT NULL, state TEXT NOT NULL, files INTEGER NOT NULL, bytes INTEGER NOT NULL,
    done_files INTEGER NOT NULL DEFAULT 0, done_bytes INTEGER NOT NULL DEFAULT 0, failed INTEGER NOT NULL DEFAULT 0,
    started REAL, finished REAL);
CREATE TABLE IF NOT EXISTS files (
    movement INTEGER NOT NULL REFERENCES movements(id), seq INTEGER NOT NULL, src TEXT NOT NULL, dst TEXT NOT NULL,
    bytes INTEGER NOT NULL, state TEXT NOT NULL, error TEXT, PRIMARY KEY (movement, seq));
CREATE INDEX IF NOT EXISTS files_pending ON files(movement, state);
"""
#: A movement row's columns, in the order :func:`movement_rows` gives them.
MOVEMENT_COLUMNS = ("id", "sources", "dst", "weight", "share", "state", "files", "bytes", "done_files", "done_bytes",
                    "failed", "created", "started", "finished")


@contextmanager
def opened(path: Path) -> Iterator[sqlite3.Connection]:
    """The journal at ``path`` (created with its directory when missing), autocommit: each function here
    begins and commits its own transaction."""
    path.parent.mkdir(parents=True, exist_ok=True)
    conn = sqlite3.connect(path, timeout=30, isolation_level=None)
    try:
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute("PRAGMA synchronous=FULL")  # a movement marked done survives a power cut
        conn.executescript(SCHEMA)
        yield conn
    finally:
        conn.close()


def add_movement(conn: sqlite3.Connection, created: float, sources: str, dst: str, weight: float, share: float,
                 files: Sequence[tuple[str, str, int]]) -> int:
    """Journal a movement and its ``(src, dst, bytes)`` files, pending (done at once when it has none); its id."""
    conn.execute("BEGIN IMMEDIATE")
    cur = conn.execute(
        "INSERT INTO movements (created, sources, dst, weight, share, state, files, bytes) "
        "VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
        (created, sources, dst, weight, share, "queued" if files else "done", len(files), sum(f[2] for f in files)))
    mid = cur.lastrowid
    assert mid is not None
    conn.executemany("INSERT INTO files (movement, seq, src, dst, bytes, state) VALUES (?, ?, ?, ?, ?, 'pending')",
                     [(mid, n, src, dst, size) for n, (src, dst, size) in enumerate(files)])
    conn.execute("COMMIT")
    return mid


def movement_rows(conn: sqlite3.Connection, active_only: bool = False) -> list[tuple]:
    """Every movement (or only the queued and running ones) as :data:`MOVEMENT_COLUMNS`, by id."""
    return conn.execute(
        f"SELECT {', '.join(MOVEMENT_COLUMNS)} FROM movements"
        + (" WHERE state IN ('queued', 'running')" if active_only else "") + " ORDER BY id").fetchall()


def cancel_movement(conn: sqlite3.Connection, movement_id: int, now: float) -> bool:
    """Cancel a queued or running movement's pending files (a finished one is left as it is); False when there is
    no such movement."""
    conn.execute("BEGIN IMMEDIATE")
    found = conn.execute("SELECT state FROM movements WHERE id = ?", (movement_id,)).fetchone()
    if not found:
        conn.execute("ROLLBACK")
        return False
    if found[0] in ("queued", "running"):
        conn.execute("UPDATE files SET state = 'cancelled' WHERE movement = ? AND state = 'pending'", (movement_id,))
        conn.execute("UPDATE movements SET state = 'cancelled', finished = ? WHERE id = ?", (now, movement_id))
    conn.execute("COMMIT")
    return True


def requeue(conn: sqlite3.Connection) -> list[str]:
    """After a stager stopped: running movements are queued again; the destinations of the pending files."""
    pending = conn.execute("SELECT dst FROM files WHERE state = 'pending'").fetchall()
    conn.execute("UPDATE movements SET state = 'queued' WHERE state = 'running'")
    return [dst for (dst,) in pending]


def active_movements(conn: sqlite3.Connection) -> list[tuple[int, int, float]]:
    """``(id, done_bytes, weight)`` of each queued or running movement with a pending file."""
    return conn.execute(
        "SELECT m.id, m.done_bytes, m.weight FROM movements m WHERE m.state IN ('queued', 'running') "
        "AND EXISTS (SELECT 1 FROM files f WHERE f.movement = m.id AND f.state = 'pending')").fetchall()


def file_bytes(conn: sqlite3.Connection, movement_id: int, seq: int) -> int:
    """The size of one file of a movement (0 when there is no such file)."""
    size = conn.execute("SELECT bytes FROM files WHERE movement = ? AND seq = ?", (movement_id, seq)).fetchone()
    return size[0] if size else 0


def first_pending(conn: sqlite3.Connection, movement_id: int, skip: Sequence[int] = ()) -> tuple | None:
    """``(seq, src, dst, bytes)`` of the movement's first pending file not in ``skip`` (files being copied)."""
    marks = ",".join("?" * len(skip))
    return conn.execute(
        "SELECT seq, src, dst, bytes FROM files WHERE movement = ? AND state = 'pending'"
        + (f" AND seq NOT IN ({marks})" if skip else "") + " ORDER BY seq LIMIT 1",
        (movement_id, *skip)).fetchone()


def mark_running(conn: sqlite3.Connection, movement_id: int, now: float) -> None:
    conn.execute("UPDATE movements SET state = 'running', started = COALESCE(started, ?) WHERE id = ?",
                 (now, movement_id))


def file_finished(conn: sqlite3.Connection, movement_id: int, seq: int, nbytes: int, error: str | None,
                  now: float) -> None:
    """One transaction: the file done (its bytes counted) or failed with ``error``, and its movement done or
    failed when it was the last pending file."""
    conn.execute("BEGIN IMMEDIATE")
    if error is None:
        conn.execute("UPDATE files SET state = 'done' WHERE movement = ? AND seq = ? AND state = 'pending'",
                     (movement_id, seq))
        conn.execute("UPDATE movements SET done_files = done_files + 1, done_bytes = done_bytes + ? "
                     "WHERE id = ?", (nbytes, movement_id))
    else:
        conn.execute("UPDATE files SET state = 'failed', error = ? WHERE movement = ? AND seq = ?",
                     (error[:500], movement_id, seq))
        conn.execute("UPDATE movements SET failed = failed + 1 WHERE id = ?", (movement_id,))
    left = conn.execute("SELECT COUNT(*) FROM files WHERE movement = ? AND state = 'pending'",
                        (movement_id,)).fetchone()[0]
    if left == 0:
        failed = conn.execute("SELECT failed FROM movements WHERE id = ?", (movement_id,)).fetchone()[0]
        conn.execute("UPDATE movements SET state = ?, finished = ? WHERE id = ? AND state = 'running'",
                     ("failed" if failed else "done", now, movement_id))
    conn.execute("COMMIT")

"""Staging in the background (seed 004, DataStager): ``iez copy --background`` hands its files to a journal and
returns at once; one staging process per state directory drains the journal at its share of the servers.

- The journal (``$IEZ_STATE_DIR/staging.db``, SQLite in WAL mode) holds each movement (destination, weight,
  share, state) and each of its files (source, destination, bytes, pending/done/failed). A file is marked
  done in the same transaction that counts its bytes, after the mover renamed its copy into place, so a
  kill -9 or a reboot at any moment loses nothing and copies nothing twice into place: a file not yet
  marked done is copied again from the start (its destination is replaced atomically, and the temporary
  files of dead movers beside the pending destinations are removed first: :mod:`iez.move.temps`, which
  never removes a temporary whose process still runs).
- The stager (``iez stage run``) takes the journal's lock (one per state directory), then, with a few worker
  threads, copies the next file of the movement that is furthest behind its weight (start-time fair
  queuing over files: each movement's virtual time is its bytes done over its weight), each file through
  the layout-aware mover (:func:`iez.move.move`). It exits when nothing is pending; ``iez copy
  --background`` (or ``iez stage resume``) starts it again, detached.
- Under ``IEZ_EMULATE`` the stager runs with libiez preloaded, in the I/O class ``staging`` capped at its
  share (``IEZ_IO_SHARE``), so a job beside it keeps the rest of each server (README "Emulated bandwidth").
"""

from __future__ import annotations

import fcntl
import os
import sqlite3
import subprocess
import sys
import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from iez.move import temps
from iez.move.files import plan

DEFAULT_SHARE = 0.3  # of each server, for background staging
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


def state_dir() -> Path:
    from iez.config import settings

    return Path(settings().state_dir)


def journal_path(directory: Path | None = None) -> Path:
    return (directory or state_dir()) / "staging.db"


@contextmanager
def journal(directory: Path | None = None):
    path = journal_path(directory)
    path.parent.mkdir(parents=True, exist_ok=True)
    conn = sqlite3.connect(path, timeout=30, isolation_level=None)
    try:
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute("PRAGMA synchronous=FULL")  # a movement marked done survives a power cut
        conn.executescript(SCHEMA)
        yield conn
    finally:
        conn.close()


@dataclass
class Movement:
    id: int
    sources: str
    dst: str
    weight: float
    share: float
    state: str
    files: int
    bytes: int
    done_files: int
    done_bytes: int
    failed: int
    created: float
    started: float | None
    finished: float | None

    def to_json(self) -> dict:
        progress = self.done_bytes / self.bytes if self.bytes else (1.0 if self.state == "done" else 0.0)
        return {"id": self.id, "state": self.state, "sources": self.sources.split("\n"), "dst": self.dst,
                "weight": self.weight, "share": self.share, "files": self.files, "bytes": self.bytes,
                "done_files": self.done_files, "done_bytes": self.done_bytes, "failed": self.failed,
                "progress": round(progress, 4), "created": self.created, "started": self.started,
                "finished": self.finished}


def submit(sources: list[str], dest: str, weight: float = 1.0, share: float = DEFAULT_SHARE,
           directory: Path | None = None) -> tuple[int, list[str]]:
    """Journal a movement of ``SRC... DST``; returns its id and the problems found (sources not copied)."""
    if not weight > 0:
        raise ValueError(f"--weight {weight} must be positive")
    if not 0 < share <= 1:
        raise ValueError(f"--share {share} is outside (0, 1]")
    if os.path.exists(dest) and not os.path.isdir(dest) and len(sources) > 1:
        raise ValueError(f"{dest}: not a directory (several sources are copied into a directory)")
    pairs, problems = plan([os.path.abspath(s) for s in sources], os.path.abspath(dest))
    sizes = [os.stat(src).st_size for src, _ in pairs]
    with journal(directory) as conn:
        conn.execute("BEGIN IMMEDIATE")
        cur = conn.execute(
            "INSERT INTO movements (created, sources, dst, weight, share, state, files, bytes) "
            "VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
            (time.time(), "\n".join(os.path.abspath(s) for s in sources), os.path.abspath(dest), weight, share,
             "queued" if pairs else "done", len(pairs), sum(sizes)))
        mid = cur.lastrowid
        conn.executemany("INSERT INTO files (movement, seq, src, dst, bytes, state) VALUES (?, ?, ?, ?, ?, 'pending')",
                         [(mid, n, src, dst, size) for n, ((src, dst), size) in enumerate(zip(pairs, sizes))])
        conn.execute("COMMIT")
    return mid, problems


def movements(directory: Path | None = None, active_only: bool = False) -> list[Movement]:
    if not journal_path(directory).exists():
        return []
    with journal(directory) as conn:
        rows = conn.execute(
            "SELECT id, sources, dst, weight, share, state, files, bytes, done_files, done_bytes, failed, created, "
            "started, finished FROM movements" + (" WHERE state IN ('queued', 'running')" if active_only else "")
            + " ORDER BY id").fetchall()
    return [Movement(*row) for row in rows]


def cancel(movement_id: int, directory: Path | None = None) -> Movement:
    with journal(directory) as conn:
        conn.execute("BEGIN IMMEDIATE")
        found = conn.execute("SELECT state FROM movements WHERE id = ?", (movement_id,)).fetchone()
        if not found:
            conn.execute("ROLLBACK")
            raise ValueError(f"no movement {movement_id} in {journal_path(directory)}")
        if found[0] in ("queued", "running"):
            conn.execute("UPDATE files SET state = 'cancelled' WHERE movement = ? AND state = 'pending'", (movement_id,))
            conn.execute("UPDATE movements SET state = 'cancelled', finished = ? WHERE id = ?",
                         (time.time(), movement_id))
        conn.execute("COMMIT")
    return next(m for m in movements(directory) if m.id == movement_id)


# ---------------------------------------------------------------------------------------------- the stager

class Busy(RuntimeError):
    """Another stager holds this state directory's journal."""


@contextmanager
def stager_lock(directory: Path | None = None):
    path = (directory or state_dir()) / "staging.lock"
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise Busy(f"a stager already drains {journal_path(directory)}") from None
        os.ftruncate(fd, 0)
        os.write(fd, f"{os.getpid()}\n".encode())
        yield
    finally:
        os.close(fd)


def running(directory: Path | None = None) -> bool:
    """Whether a stager holds the lock now."""
    path = (directory or state_dir()) / "staging.lock"
    if not path.exists():
        return False
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        fcntl.flock(fd, fcntl.LOCK_UN)
        return False
    except BlockingIOError:
        return True
    finally:
        os.close(fd)


class Stager:
    """Drains the journal: ``workers`` threads, each taking the next file of the movement furthest behind."""

    def __init__(self, directory: Path | None = None, workers: int = 2, file_workers: int = 2):
        self.directory = directory
        self.workers = workers
        self.file_workers = file_workers
        self._lock = threading.Lock()
        self._taken: set[tuple[int, int]] = set()
        self.copied = 0
        self.temporaries_removed = 0

    def recover(self) -> int:
        """After a kill: the temporaries of dead movers beside pending files are removed (a live process's
        never), running movements are queued again. Returns the files still pending."""
        with journal(self.directory) as conn:
            pending = conn.execute("SELECT dst FROM files WHERE state = 'pending'").fetchall()
            conn.execute("UPDATE movements SET state = 'queued' WHERE state = 'running'")
        self.temporaries_removed += temps.sweep_beside(dst for (dst,) in pending).removed
        return len(pending)

    def _next(self) -> tuple[int, int, str, str, int] | None:
        """The next file: of the active movement with the least bytes done per weight (SFQ over files)."""
        with self._lock, journal(self.directory) as conn:
            rows = conn.execute(
                "SELECT m.id, m.done_bytes, m.weight FROM movements m WHERE m.state IN ('queued', 'running') "
                "AND EXISTS (SELECT 1 FROM files f WHERE f.movement = m.id AND f.state = 'pending')").fetchall()
            # bytes taken but not done yet count for their movement, so two workers do not both favour it
            inflight: dict[int, int] = {}
            for mid, seq in self._taken:
                size = conn.execute("SELECT bytes FROM files WHERE movement = ? AND seq = ?", (mid, seq)).fetchone()
                inflight[mid] = inflight.get(mid, 0) + (size[0] if size else 0)
            for mid, done, weight in sorted(rows, key=lambda r: ((r[1] + inflight.get(r[0], 0)) / r[2], r[0])):
                taken = [seq for m, seq in self._taken if m == mid]
                marks = ",".join("?" * len(taken))
                row = conn.execute(
                    "SELECT seq, src, dst, bytes FROM files WHERE movement = ? AND state = 'pending'"
                    + (f" AND seq NOT IN ({marks})" if taken else "") + " ORDER BY seq LIMIT 1",
                    (mid, *taken)).fetchone()
                if row:
                    self._taken.add((mid, row[0]))
                    conn.execute("UPDATE movements SET state = 'running', started = COALESCE(started, ?) WHERE id = ?",
                                 (time.time(), mid))
                    return (mid, *row)
            return None

    def _done(self, mid: int, seq: int, nbytes: int, error: str | None) -> None:
        with self._lock, journal(self.directory) as conn:
            conn.execute("BEGIN IMMEDIATE")
            if error is None:
                conn.execute("UPDATE files SET state = 'done' WHERE movement = ? AND seq = ? AND state = 'pending'",
                             (mid, seq))
                conn.execute("UPDATE movements SET done_files = done_files + 1, done_bytes = done_bytes + ? "
                             "WHERE id = ?", (nbytes, mid))
            else:
                conn.execute("UPDATE files SET state = 'failed', error = ? WHERE movement = ? AND seq = ?",
                             (error[:500], mid, seq))
                conn.execute("UPDATE movements SET failed = failed + 1 WHERE id = ?", (mid,))
            left = conn.execute("SELECT COUNT(*) FROM files WHERE movement = ? AND state = 'pending'", (mid,)).fetchone()[0]
            if left == 0:
                failed = conn.execute("SELECT failed FROM movements WHERE id = ?", (mid,)).fetchone()[0]
                conn.execute("UPDATE movements SET state = ?, finished = ? WHERE id = ? AND state = 'running'",
                             ("failed" if failed else "done", time.time(), mid))
            conn.execute("COMMIT")
            self._taken.discard((mid, seq))

    def _worker(self) -> None:
        from iez.move import MoveOptions, move

        while True:
            job = self._next()
            if job is None:
                return
            mid, seq, src, dst, nbytes = job
            errors: list[str] = []
            try:
                report = move([(src, dst, None)], MoveOptions(workers=self.file_workers, progress=False,
                                                                on_error=errors.append, sweep=False))
                error = "; ".join(errors) or ("; ".join(f.get("error", str(f)) for f in report.failed) or None)
            except (OSError, ValueError) as err:
                error = f"{src}: {err}"
            self._done(mid, seq, nbytes, error)
            if error is None:
                self.copied += 1

    def run(self) -> int:
        """Drains everything pending; returns the files copied. Raises :class:`Busy` if another stager runs."""
        with stager_lock(self.directory):
            self.recover()
            threads = [threading.Thread(target=self._worker, name=f"iez-stage-{n}") for n in range(self.workers)]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
        return self.copied


def start_detached(directory: Path | None = None, share: float = DEFAULT_SHARE) -> subprocess.Popen | None:
    """Starts ``iez stage run`` in its own session (it outlives the caller), under libiez when emulating and in
    the I/O class ``staging`` capped at ``share``; None when a stager already runs."""
    if running(directory):
        return None
    env = dict(os.environ)
    if directory is not None:
        env["IEZ_STATE_DIR"] = str(directory)
    env["IEZ_IO_CLASS"] = "staging"
    env["IEZ_IO_SHARE"] = repr(share)
    if env.get("IEZ_EMULATE") and "libiez" not in env.get("LD_PRELOAD", ""):
        from iez.demo.pipeline import StepFailed, find_library

        try:
            lib = find_library()
        except StepFailed as err:
            raise ValueError(f"IEZ_EMULATE is set but libiez cannot be preloaded: {err}") from None
        env["LD_PRELOAD"] = " ".join(filter(None, [str(lib), env.get("LD_PRELOAD", "")]))
        env.setdefault("IEZ_MODE", "off")
    log = open((directory or state_dir()) / "staging.log", "ab")
    try:
        return subprocess.Popen([sys.executable, "-m", "iez.cli", "stage", "run"], env=env, stdin=subprocess.DEVNULL,
                                stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    finally:
        log.close()

"""Staging in the background (seed 004, DataStager): ``iez copy --background`` hands its files to a journal and
returns at once; one staging process per state directory drains the journal at its share of the servers.

- The journal (``$IEZ_STATE_DIR/staging.db``, SQLite in WAL mode, :mod:`iez.db.stager_state`) holds each movement (destination, weight,
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
import subprocess
import sys
import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from iez.db import stager_state as journal_db
from iez.errors import StorageUnavailable
from iez.move import temps
from iez.move.files import plan
from iez.runtime import LibraryNotFound, needs_preload, preload_into

DEFAULT_SHARE = 0.3  # of each server, for background staging


def state_dir() -> Path:
    from iez.config import settings

    return Path(settings().state_dir)


def journal_path(directory: Path | None = None) -> Path:
    return (directory or state_dir()) / "staging.db"


def journal(directory: Path | None = None):
    """The journal of ``directory`` (default: the state directory), opened (:func:`iez.db.stager_state.opened`)."""
    return journal_db.opened(journal_path(directory))


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
        mid = journal_db.add_movement(conn, time.time(), "\n".join(os.path.abspath(s) for s in sources),
                                      os.path.abspath(dest), weight, share,
                                      [(src, dst, size) for (src, dst), size in zip(pairs, sizes)])
    return mid, problems


def movements(directory: Path | None = None, active_only: bool = False) -> list[Movement]:
    if not journal_path(directory).exists():
        return []
    with journal(directory) as conn:
        rows = journal_db.movement_rows(conn, active_only)
    return [Movement(*row) for row in rows]


def cancel(movement_id: int, directory: Path | None = None) -> Movement:
    with journal(directory) as conn:
        if not journal_db.cancel_movement(conn, movement_id, time.time()):
            raise ValueError(f"no movement {movement_id} in {journal_path(directory)}")
    return next(m for m in movements(directory) if m.id == movement_id)


# ---------------------------------------------------------------------------------------------- the stager

class Busy(StorageUnavailable, RuntimeError):
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
            pending = journal_db.requeue(conn)
        self.temporaries_removed += temps.sweep_beside(pending).removed
        return len(pending)

    def _next(self) -> tuple[int, int, str, str, int] | None:
        """The next file: of the active movement with the least bytes done per weight (SFQ over files)."""
        with self._lock, journal(self.directory) as conn:
            rows = journal_db.active_movements(conn)
            # bytes taken but not done yet count for their movement, so two workers do not both favour it
            inflight: dict[int, int] = {}
            for mid, seq in self._taken:
                inflight[mid] = inflight.get(mid, 0) + journal_db.file_bytes(conn, mid, seq)
            for mid, done, weight in sorted(rows, key=lambda r: ((r[1] + inflight.get(r[0], 0)) / r[2], r[0])):
                row = journal_db.first_pending(conn, mid, [seq for m, seq in self._taken if m == mid])
                if row:
                    self._taken.add((mid, row[0]))
                    journal_db.mark_running(conn, mid, time.time())
                    return (mid, *row)
            return None

    def _done(self, mid: int, seq: int, nbytes: int, error: str | None) -> None:
        with self._lock, journal(self.directory) as conn:
            journal_db.file_finished(conn, mid, seq, nbytes, error, time.time())
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
    if needs_preload(env):
        try:
            preload_into(env)
        except LibraryNotFound as err:
            raise ValueError(f"IEZ_EMULATE is set but libiez cannot be preloaded: {err}") from None
    log = open((directory or state_dir()) / "staging.log", "ab")
    try:
        return subprocess.Popen([sys.executable, "-m", "iez.cli", "stage", "run"], env=env, stdin=subprocess.DEVNULL,
                                stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    finally:
        log.close()

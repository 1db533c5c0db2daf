"""Engines and transactions for the interaction DB, on SQLite and MariaDB alike.

Writers are serialised, one at a time, on both databases:

- SQLite: a writing transaction starts with ``BEGIN IMMEDIATE``, which takes the
  database's write lock up front (a deferred ``BEGIN`` that reads then writes
  can fail with "database is locked" when another writer got in between).
  Readers use a plain ``BEGIN`` and, under WAL, never wait for a writer.
- MariaDB: a writing transaction first *writes* the single row of
  ``iez_lock`` (deletes it and inserts it again: the table has no other column
  to change, and a write that changes nothing is no write), under READ
  COMMITTED: the delete takes the row's lock, as ``SELECT ... FOR UPDATE``
  did, so what the writer reads after that is what the previous writer
  committed. On one server the row lock is what serialises writers. On a
  Galera cluster (writes to any node) row locks are not replicated: with the
  lock alone, two writers on two nodes both held "their" lock and both read
  the same free space (measured: 120 reserved on 100 free). Galera certifies
  *written* rows instead: of two transactions that wrote the lock row
  concurrently, on any nodes, the later in the cluster's order is refused with
  error 1213 (at commit, or aborted by the applier of the earlier one when it
  reaches its node), so no writer commits having read a state that another
  writer had already changed. Every writer writes the row, so writers are
  serialised cluster-wide.

A refused writer is tried again, whole: :func:`write_transaction` re-runs the
transaction's body on a new transaction after a deadlock or certification
failure (MariaDB 1213), a lock wait time-out (1205), or a Galera node that is
not ready for queries (1047, e.g. while it rejoins), at most
:data:`WRITE_ATTEMPTS` times with jittered exponential backoff
(:func:`retry_delay`: a random wait of up to 10 ms, 20 ms, ... capped at
0.5 s; at most 2.1 s of waiting over the attempts, about half that on
average), and only then reports :class:`DatabaseUnavailable` (the API's 503).
A body must therefore be safe to run again: it only touches the DB through
its session and keeps no state outside it (it builds what it returns afresh
each time). :func:`write_session` is the one-attempt form (a ``with`` block
cannot be re-run), for tests and read-mostly callers; it raises
:class:`WriteConflict` for a refused writer.

Allocation reads every OST and may place on any of them, so any two
allocations conflict; one lock is then the simplest correct rule, and writes
(statistics every minute per OSS, requests and allocations per job) are far
too rare for it to cost anything. Lookups never take it.

MariaDB connections are checked before use (``pool_pre_ping``) and recycled,
so a restarted server costs at most one retried read (:func:`read`).

Nothing waits on the database without bound: a MariaDB connection gives up
after ``connect_timeout`` (5 s) to connect and ``read_timeout`` /
``write_timeout`` (15 s) for an answer or a send (:data:`MARIADB_TIMEOUTS`; a
URL's own ``?read_timeout=60`` wins), so a stalled server costs a caller a
bounded wait and then :class:`DatabaseUnavailable`; SQLite waits at most
``SQLITE_BUSY_S`` (30 s) for another writer's lock. Schema migrations run
without the read time-out (:func:`migration_transaction`). :func:`make_probe`
gives the short-fused, unpooled engine ``/healthz`` checks with.

Opening never creates. Every SQLite connection (engines and the lookup path
alike, :func:`open_sqlite`) opens the file with ``mode=rw``, so a missing file
or directory is refused with :class:`DatabaseMissing` instead of appearing
empty, and a missing MariaDB database (error 1049) is refused the same way.
Only :func:`iez.db.schema.ensure_database` creates a database, and only
``iez db upgrade`` and ``iez alloc add`` (on a database that does not exist
or holds no tables) call it.
"""

from __future__ import annotations

import logging
import random
import sqlite3
import threading
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Callable, Iterator, TypeVar
from urllib.parse import quote

from sqlalchemy import Connection, Engine, create_engine, event, text
from sqlalchemy.engine import URL
from sqlalchemy.exc import DBAPIError, OperationalError
from sqlalchemy.orm import Session
from sqlalchemy.pool import NullPool

from iez.config import describe
from iez.errors import StorageUnavailable

T = TypeVar("T")

log = logging.getLogger("iez.db")

_engines: dict[str, Engine] = {}
_engines_lock = threading.Lock()


#: MariaDB's "Unknown database" error.
ER_BAD_DB_ERROR = 1049


class DatabaseUnavailable(StorageUnavailable, OSError):
    """The interaction DB cannot be reached; the message says which one and why."""


class WriteConflict(DatabaseUnavailable):
    """A writing transaction the database refused so that it can be run again (a deadlock, a Galera
    certification failure, a lock wait time-out, a Galera node not ready yet); :func:`write_transaction`
    retries it. Left unretried (or still refused after :data:`WRITE_ATTEMPTS`), it is an unavailable DB."""

    def __init__(self, message: str, code: int):
        super().__init__(message)
        self.code = code


class DatabaseMissing(DatabaseUnavailable):
    """The interaction DB does not exist (no SQLite file or directory, no MariaDB database).

    Nothing that only reads or serves creates one; the message names the
    ``iez db upgrade`` command that does.
    """


def upgrade_command(url: URL) -> str:
    """The ``iez db upgrade`` command line for ``url`` (password hidden), quoted for a shell."""
    db = describe(url)
    return f"iez db upgrade --db {db}" if "://" in db else f"iez db upgrade --db '{db}'"


def missing(url: URL) -> DatabaseMissing:
    """:class:`DatabaseMissing` for ``url``, saying what is missing and the command that creates it."""
    if url.get_backend_name() == "sqlite" and url.database is not None:  # a file's URL (none: in memory)
        path = Path(url.database)
        what = "no such file" if path.parent.is_dir() else f"no directory {path.parent}"
        return DatabaseMissing(f"no interaction DB at {path} ({what}): run `{upgrade_command(url)}` to create it")
    return DatabaseMissing(f"interaction DB {describe(url)} does not exist: run `{upgrade_command(url)}` to create it")


def open_sqlite(path: str, **kwargs) -> sqlite3.Connection:
    """A connection to the existing SQLite file ``path``, never creating it or its directory.

    The file is opened through a ``file:`` URI with ``mode=rw`` (read-only if the
    file is write-protected, as usual); a missing one raises :class:`DatabaseMissing`.
    A ``sqlite:///file:...?uri=true`` URL's own URI is used as given.
    """
    if kwargs.get("uri"):
        return sqlite3.connect(path, **kwargs)
    if not Path(path).exists():
        raise missing(URL.create("sqlite", database=path))
    try:
        return sqlite3.connect(f"file:{quote(path)}?mode=rw", uri=True, **kwargs)
    except sqlite3.OperationalError:
        if not Path(path).exists():  # removed in between
            raise missing(URL.create("sqlite", database=path)) from None
        raise


def is_sqlite(engine: Engine | Connection) -> bool:
    return engine.dialect.name == "sqlite"


#: mysqlclient's time-outs in seconds: to connect, and to wait for each answer from (or send to) the server.
MARIADB_TIMEOUTS = {"connect_timeout": 5, "read_timeout": 15, "write_timeout": 15}
#: How long a SQLite connection waits for another writer's lock before "database is locked".
SQLITE_BUSY_S = 30.0


def mariadb_timeouts(url: URL, **override: int) -> dict[str, int]:
    """:data:`MARIADB_TIMEOUTS` (with ``override``) less those the URL sets itself (``?read_timeout=60``)."""
    return {k: v for k, v in {**MARIADB_TIMEOUTS, **override}.items() if k not in url.query}


def make_engine(url: URL) -> Engine:
    """A new engine for ``url`` with iez's connection rules (WAL, pre-ping, write lock, time-outs).

    Connecting never creates the database (see :func:`open_sqlite`); create it
    first with :func:`iez.db.schema.ensure_database` (``upgrade`` does).
    """
    if url.get_backend_name() == "sqlite":
        engine = create_engine(url, connect_args={"timeout": SQLITE_BUSY_S, "check_same_thread": False}, pool_size=8)
        _sqlite_rules(engine)
        return engine
    return create_engine(
        url,
        pool_pre_ping=True,
        pool_recycle=3600,
        pool_size=8,
        max_overflow=16,
        isolation_level="READ COMMITTED",
        connect_args=mariadb_timeouts(url),
    )


@contextmanager
def migration_transaction(engine: Engine) -> Iterator[Connection]:
    """A transaction for schema migrations: on MariaDB on a connection of its own without the read and write
    time-outs, since one ALTER TABLE on a large table may rightly take minutes with the server silent."""
    if is_sqlite(engine):
        with engine.begin() as conn:
            yield conn
        return
    patient = create_engine(engine.url, poolclass=NullPool, isolation_level="READ COMMITTED",
                            connect_args={"connect_timeout": MARIADB_TIMEOUTS["connect_timeout"]})
    try:
        with patient.begin() as conn:
            yield conn
    finally:
        patient.dispose()


def make_probe(url: URL, timeout_s: int = 2) -> Engine:
    """An engine for health checks: a new connection per check (a stale pooled one proves nothing) that
    gives up after ``timeout_s`` to connect, to get an answer, or (SQLite) to get the write lock."""
    if url.get_backend_name() == "sqlite":
        engine = create_engine(url, poolclass=NullPool,
                               connect_args={"timeout": float(timeout_s), "check_same_thread": False})
        _sqlite_rules(engine)
        return engine
    timeouts = {"connect_timeout": timeout_s, "read_timeout": timeout_s, "write_timeout": timeout_s}
    return create_engine(url, poolclass=NullPool, isolation_level="READ COMMITTED", connect_args=timeouts)


def engine_for(url: URL) -> Engine:
    """One shared engine per database URL in this process."""
    key = url.render_as_string(hide_password=False)
    with _engines_lock:
        if key not in _engines:
            _engines[key] = make_engine(url)
        return _engines[key]


def dispose_engines() -> None:
    """Close and forget every shared engine of this process (what its exit would do)."""
    with _engines_lock:
        engines = list(_engines.values())
        _engines.clear()
    for engine in engines:
        engine.dispose()


def _sqlite_rules(engine: Engine) -> None:
    @event.listens_for(engine, "do_connect")
    def _open_existing(_dialect, _record, cargs, cparams):
        return open_sqlite(cargs[0], **cparams)

    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_conn, _record) -> None:
        dbapi_conn.isolation_level = None  # we emit BEGIN ourselves (below)
        cursor = dbapi_conn.cursor()
        cursor.execute("PRAGMA journal_mode=WAL")
        cursor.execute("PRAGMA synchronous=NORMAL")
        cursor.execute("PRAGMA foreign_keys=ON")
        cursor.close()

    @event.listens_for(engine, "begin")
    def _on_begin(conn: Connection) -> None:
        immediate = conn.get_execution_options().get("iez_write", False)
        conn.exec_driver_sql("BEGIN IMMEDIATE" if immediate else "BEGIN")


#: MariaDB/Galera errors after which a writing transaction is run again: 1213 deadlock (and Galera's
#: certification failure, "WSREP detected deadlock/conflict"), 1205 lock wait time-out, 1047 "WSREP has not
#: yet prepared node for application use" (a node joining or resyncing; it may be ready a moment later).
RETRY_CODES = frozenset({1213, 1205, 1047})
#: How many times :func:`write_transaction` tries a transaction before reporting the DB unavailable.
WRITE_ATTEMPTS = 10
#: Backoff before retry k (1, 2, ...): a uniformly random wait in [0, min(RETRY_CAP_S, RETRY_BASE_S * 2**(k-1))].
RETRY_BASE_S = 0.01
RETRY_CAP_S = 0.5


def retry_delay(attempt: int) -> float:
    """The jittered ("full jitter") wait before trying again after failed attempt ``attempt`` (1-based):
    random, so writers refused together do not collide again in step; at most 10 ms, 20 ms, ..., 0.5 s."""
    return random.uniform(0.0, min(RETRY_CAP_S, RETRY_BASE_S * 2 ** (attempt - 1)))


def _lock_writers(session: Session) -> None:
    """Take the write lock on MariaDB: write the lock row (its lock taken by the delete; the insert puts it
    back), so that Galera certifies every writer against every other (see the module's notes). ``REPLACE``
    of the same row would be one statement, but it changes nothing, so Galera does not certify it (measured:
    120 reserved on 100 free in 8 runs of 10)."""
    session.execute(text("DELETE FROM iez_lock WHERE id = 1"))
    session.execute(text("INSERT INTO iez_lock (id) VALUES (1)"))


@contextmanager
def write_session(engine: Engine) -> Iterator[Session]:
    """A session holding the write lock; commits on success, rolls back on error (one attempt: a writer the
    database refused so that it may run again raises :class:`WriteConflict`; :func:`write_transaction` retries)."""
    with Session(engine, expire_on_commit=False) as session:
        try:
            session.connection(execution_options={"iez_write": True})
            if not is_sqlite(engine):
                _lock_writers(session)
            yield session
            session.commit()
        except OperationalError as err:
            session.rollback()
            raise unavailable(engine, err) from err
        except BaseException as err:
            session.rollback()
            code = _driver_conflict(err)
            if code is not None:  # raised by the driver itself (a raw cursor's executemany)
                raise WriteConflict(f"interaction DB {describe(engine.url)} refused the write: "
                                    f"{str(err).splitlines()[0]}", code) from err
            raise


def _driver_conflict(err: BaseException) -> int | None:
    """The code of a MariaDB driver's own error (not wrapped by SQLAlchemy) when one of :data:`RETRY_CODES`,
    else None."""
    code = error_code(err)
    if type(err).__module__.startswith("MySQLdb") and isinstance(code, int) and code in RETRY_CODES:
        return code
    return None


def write_transaction(engine: Engine, body: Callable[[Session], T], attempts: int = WRITE_ATTEMPTS) -> T:
    """``body(session)`` in a transaction holding the write lock, committed; its result.

    Tried again, on a new transaction, when the database refuses it so that it can be (:data:`RETRY_CODES`: a
    Galera certification failure, a deadlock, a lock wait time-out, a node not ready), at most ``attempts``
    times with :func:`retry_delay` between; then :class:`DatabaseUnavailable` naming the attempts. ``body``
    may run more than once: it must touch nothing outside the session it is given that a rerun would change
    (build its result afresh; no counters, no messages, no files).
    """
    for attempt in range(1, attempts + 1):
        try:
            with write_session(engine) as session:
                return body(session)
        except WriteConflict as err:
            if attempt == attempts:
                raise DatabaseUnavailable(f"{err} (the write was refused {attempts} times in a row; "
                                          f"MariaDB error {err.code})") from err
            write_retries.add(1)
            log.debug("write transaction refused (MariaDB error %d), attempt %d of %d: trying again", err.code,
                      attempt, attempts)
            time.sleep(retry_delay(attempt))
    raise AssertionError("unreachable")


class _Counter:
    """A thread-safe count (of retried writes in this process: tests and benchmarks read it)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.value = 0

    def add(self, n: int) -> None:
        with self._lock:
            self.value += n


#: Writing transactions run again in this process (after a :class:`WriteConflict`), since it started.
write_retries = _Counter()


def read(engine: Engine, query: Callable[[Connection], T]) -> T:
    """Run a read-only ``query`` on a connection, retried once if the connection broke (a restarted server)."""
    for attempt in (1, 2):
        try:
            with engine.connect() as conn:
                return query(conn)
        except OperationalError as err:
            if attempt == 2 or not _is_connection_error(err):
                raise unavailable(engine, err) from err
    raise AssertionError("unreachable")


def _is_connection_error(err: DBAPIError) -> bool:
    return bool(err.connection_invalidated) or not is_sqlite_error(err)


def is_sqlite_error(err: DBAPIError) -> bool:
    return type(err.orig).__module__.startswith("sqlite3")


def error_code(orig: BaseException | None) -> object:
    """A DBAPI error's code (mysqlclient puts it first in ``args``), or None."""
    args = getattr(orig, "args", ())
    return args[0] if args else None


def unavailable(engine: Engine, err: DBAPIError) -> DatabaseUnavailable:
    """What an OperationalError means for the caller: :class:`DatabaseMissing` or :class:`DatabaseUnavailable`."""
    code = None if is_sqlite(engine) else error_code(err.orig)
    if code == ER_BAD_DB_ERROR:
        return missing(engine.url)
    reason = str(err.orig).strip().splitlines()[0] if err.orig is not None else str(err)
    message = f"interaction DB {describe(engine.url)} is unavailable: {reason}"
    if code in RETRY_CODES:
        return WriteConflict(message, code)
    return DatabaseUnavailable(message)

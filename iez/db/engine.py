"""Engines and transactions for the interaction DB, on SQLite and MariaDB alike.

Writers are serialised, one at a time, on both databases:

- SQLite: a writing transaction starts with ``BEGIN IMMEDIATE``, which takes the
  database's write lock up front (a deferred ``BEGIN`` that reads then writes
  can fail with "database is locked" when another writer got in between).
  Readers use a plain ``BEGIN`` and, under WAL, never wait for a writer.
- MariaDB: a writing transaction first locks the single row of ``iez_lock``
  with ``SELECT ... FOR UPDATE``, under READ COMMITTED, so what it reads after
  that is what the previous writer committed.

Allocation reads every OST and may place on any of them, so any two
allocations conflict; one lock is then the simplest correct rule, and writes
(statistics every minute per OSS, requests and allocations per job) are far
too rare for it to cost anything. Lookups never take it.

MariaDB connections are checked before use (``pool_pre_ping``) and recycled,
so a restarted server costs at most one retried read (:func:`read`).
"""

from __future__ import annotations

import threading
from contextlib import contextmanager
from pathlib import Path
from typing import Callable, Iterator, TypeVar

from sqlalchemy import Connection, Engine, create_engine, event, text
from sqlalchemy.engine import URL
from sqlalchemy.exc import DBAPIError, OperationalError
from sqlalchemy.orm import Session

from iez.config import describe

T = TypeVar("T")

_engines: dict[str, Engine] = {}
_engines_lock = threading.Lock()


class DatabaseUnavailable(OSError):
    """The interaction DB cannot be reached; the message says which one and why."""


def is_sqlite(engine: Engine | Connection) -> bool:
    return engine.dialect.name == "sqlite"


def make_engine(url: URL) -> Engine:
    """A new engine for ``url`` with iez's connection rules (WAL, pre-ping, write lock)."""
    if url.get_backend_name() == "sqlite":
        Path(url.database).parent.mkdir(parents=True, exist_ok=True)
        engine = create_engine(url, connect_args={"timeout": 30, "check_same_thread": False}, pool_size=8)
        _sqlite_rules(engine)
        return engine
    return create_engine(
        url,
        pool_pre_ping=True,
        pool_recycle=3600,
        pool_size=8,
        max_overflow=16,
        isolation_level="READ COMMITTED",
        connect_args={"connect_timeout": 5},
    )


def engine_for(url: URL) -> Engine:
    """One shared engine per database URL in this process."""
    key = url.render_as_string(hide_password=False)
    with _engines_lock:
        if key not in _engines:
            _engines[key] = make_engine(url)
        return _engines[key]


def _sqlite_rules(engine: Engine) -> None:
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


@contextmanager
def write_session(engine: Engine) -> Iterator[Session]:
    """A session holding the write lock; commits on success, rolls back on error."""
    with Session(engine, expire_on_commit=False) as session:
        try:
            session.connection(execution_options={"iez_write": True})
            if not is_sqlite(engine):
                session.execute(text("SELECT id FROM iez_lock WHERE id = 1 FOR UPDATE"))
            yield session
            session.commit()
        except OperationalError as err:
            session.rollback()
            raise unavailable(engine, err) from err
        except BaseException:
            session.rollback()
            raise


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


def unavailable(engine: Engine, err: DBAPIError) -> DatabaseUnavailable:
    reason = str(err.orig).strip().splitlines()[0] if err.orig is not None else str(err)
    return DatabaseUnavailable(f"interaction DB {describe(engine.url)} is unavailable: {reason}")

"""The lookup hot path: one plain SELECT per path on a DBAPI connection, no ORM, no pool.

The placement library asks for a layout on every file creation, so this path
avoids everything that costs per call in SQLAlchemy (pool checkout and
pre-ping, BEGIN/ROLLBACK, statement compilation, an expanding IN). Each thread
keeps one autocommit connection, so every SELECT sees the latest committed
allocations. A connection that broke (MariaDB restarted) is replaced and the
query retried once; if that fails too the caller gets
:class:`~iez.db.engine.DatabaseUnavailable`.

A layout with a pool or components (PFL) answers ``pool`` and ``components``
(each ``start``, ``end``, ``stripe_size``, ``stripe_count``, ``osts``), read
from the row's layout text; a plain layout answers the four plain fields only.
"""

from __future__ import annotations

import threading
from typing import Callable, Iterable, Sequence, TypeVar

from sqlalchemy import Engine

from iez.config import describe
from iez.db.engine import ER_BAD_DB_ERROR, DatabaseUnavailable, error_code, mariadb_timeouts, missing, open_sqlite
from iez.db.models import parse_osts
from iez.layout.emulated import parse_attr
from iez.model import Allocation

T = TypeVar("T")
CHUNK = 500

_COLUMNS = "a.path, a.stripe_size, a.stripe_count, a.osts, a.pool, a.layout, a.note"
_LIVE = "a.state <> 'stale'"


def one_statement(sqlite: bool, extra: str = "", joins: str = "") -> str:
    """The live allocation of one path (the newest non-stale row), as driver-level text for SQLite or MariaDB;
    ``extra`` columns (e.g. ``", p.owner"``) from the ``joins`` after the seven :func:`layout` reads."""
    mark = "?" if sqlite else "%s"
    return f"SELECT {_COLUMNS}{extra} FROM allocations a{joins} WHERE a.path = {mark} AND {_LIVE} " \
           "ORDER BY a.id DESC LIMIT 1"


def many_statement(sqlite: bool, count: int, extra: str = "", joins: str = "") -> str:
    """The non-stale allocations (``id`` first) of ``count`` paths: :func:`newest_per_path` picks each path's live
    one. MariaDB estimates long IN lists from index statistics and, on a prefix index, may choose a full scan
    (100 ms for 500 paths out of 100,000); the index is always right here."""
    hint = "" if sqlite else " FORCE INDEX (ix_allocations_path)"
    marks = ",".join(["?" if sqlite else "%s"] * count)
    return f"SELECT a.id, {_COLUMNS}{extra} FROM allocations a{hint}{joins} WHERE a.path IN ({marks}) AND {_LIVE}"


def newest_per_path(rows: Iterable[Sequence]) -> dict[str, Sequence]:
    """The live allocation of each path among non-stale ``(id, path, ...)`` rows: the newest (highest id), as
    ``ORDER BY id DESC LIMIT 1`` picks it for one path. Every batch lookup and the layout maps reduce with this."""
    best: dict[str, Sequence] = {}
    for row in rows:
        if row[1] not in best or best[row[1]][0] < row[0]:
            best[row[1]] = row
    return best


def allocation(row) -> Allocation:
    """``(path, stripe_size, stripe_count, osts[, pool, layout[, note]])`` as the allocation it stores: the plain
    columns, and the pool (the column winning), components and mirrors of its layout text when it has one."""
    pool, text = (row[4], row[5]) if len(row) > 4 else (None, None)
    note = (row[6] or "") if len(row) > 6 else ""
    if not text:
        return Allocation(row[0], row[1], tuple(parse_osts(row[3])), "", pool or None, (), note)
    parsed = parse_attr(text, f"allocation of {row[0]}")
    return Allocation(row[0], row[1], tuple(parse_osts(row[3])), "", pool or parsed.pool, parsed.components, note,
                      parsed.mirrors, parsed.preferred_mirror, parsed.stale)


def layout(row) -> dict:
    """A stored allocation row (:func:`allocation`) as the API's JSON (:meth:`Allocation.to_json`; ``note``:
    what the policy gave up for the file, e.g. a degraded OST, when anything)."""
    return allocation(row).to_json()


class LayoutReader:
    """Looks layouts up by path for many threads at once."""

    def __init__(self, engine: Engine):
        self._dialect = engine.dialect
        self._url = engine.url
        self._sqlite = self.sqlite = engine.dialect.name == "sqlite"
        self._one = one_statement(self._sqlite)
        self._local = threading.local()

    def _connect(self):
        dbapi = self._dialect.loaded_dbapi
        args, kwargs = self._dialect.create_connect_args(self._url)
        if self._sqlite:  # never creates a missing file (DatabaseMissing)
            conn = open_sqlite(args[0], **{**kwargs, "timeout": 30, "check_same_thread": False})
            conn.isolation_level = None  # autocommit: each SELECT reads the latest commit
        else:
            conn = dbapi.connect(*args, **{**kwargs, **mariadb_timeouts(self._url)})
            conn.autocommit(True)
        return conn

    def _run(self, query: Callable[[object], T]) -> T:
        dbapi = self._dialect.loaded_dbapi
        for attempt in (1, 2):
            conn = getattr(self._local, "conn", None)
            try:
                if conn is None:
                    conn = self._local.conn = self._connect()
                return query(conn.cursor())
            except (dbapi.OperationalError, dbapi.InterfaceError) as err:
                self._drop(conn)
                if not self._sqlite and error_code(err) == ER_BAD_DB_ERROR:
                    raise missing(self._url) from err
                if attempt == 2:
                    raise DatabaseUnavailable(f"interaction DB {describe(self._url)} is unavailable: {err}") from err
            except dbapi.DatabaseError as err:  # a dropped table, a revoked grant: no lookup can be answered
                raise DatabaseUnavailable(f"interaction DB {describe(self._url)} cannot answer lookups: {err}") from err
        raise AssertionError("unreachable")

    def _drop(self, conn) -> None:
        self._local.conn = None
        if conn is not None:
            try:
                conn.close()
            except Exception:  # already broken; nothing left to release
                pass

    def one(self, path: str) -> dict | None:
        """The live layout of ``path``, or None."""

        def query(cursor):
            cursor.execute(self._one, (path,))
            row = cursor.fetchone()
            cursor.close()
            return layout(row) if row is not None else None

        return self._run(query)

    def many(self, paths: Sequence[str]) -> dict[str, dict]:
        """Live layouts of those ``paths`` that have one, by path."""
        unique = list(dict.fromkeys(paths))

        def query(cursor):
            rows = []
            for start in range(0, len(unique), CHUNK):
                part = unique[start : start + CHUNK]
                cursor.execute(many_statement(self._sqlite, len(part)), part)
                rows += cursor.fetchall()
            cursor.close()
            return {path: layout(row[1:]) for path, row in newest_per_path(rows).items()}

        return self._run(query)

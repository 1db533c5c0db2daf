"""Writing the inventory: batched upserts and deletes in one transaction, and paths resolved from directories.

Rows go in batches with the database's own upsert (SQLite: ``executemany`` of one prepared ``ON CONFLICT DO
UPDATE``; MariaDB: multi-row ``ON DUPLICATE KEY UPDATE`` text, 2,000 rows a statement in key order, run here or
by a :class:`Sender`'s thread); the statements themselves are :mod:`iez.db.inventory`'s. A record applied twice
leaves the same row, which is what makes a replay after a crash harmless. Every transaction goes through
:func:`write`, which re-runs it when Galera refuses it. A file's stripe objects are replaced whole whenever its
row is written. Inventory writes do not take the allocation lock (``iez_lock``): nothing an allocation reads is
written here, and one consumer per changelog is serialised on its position row instead (:func:`lock_position`),
so ingesting a changelog never delays a job's layout.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from contextlib import contextmanager
from operator import itemgetter
from typing import Any, Callable, Iterable, Iterator, Sequence, TypeVar

from sqlalchemy import Connection, Engine
from sqlalchemy.exc import DBAPIError

from iez.config import describe
from iez.db import inventory as sql
from iez.db.engine import (
    RETRY_CODES,
    WRITE_ATTEMPTS,
    DatabaseUnavailable,
    error_code,
    is_sqlite,
    retry_delay,
    write_retries,
)
from iez.db.inventory import (  # noqa: F401 (the inventory's own names for them)
    DIR_COLUMNS,
    FILE_COLUMNS,
    ensure_root,
    finish_root,
    lock_position,
    mark_stale,
    save_position,
    seeded_roots,
    summary,
)

Send = Callable[[str], None]
#: Rows a MariaDB statement of text holds, and rows a SQLite ``executemany`` binds.
TEXT_ROWS, SQLITE_ROWS = 2000, 5000


@contextmanager
def transaction(engine: Engine) -> Iterator[Connection]:
    """A writing transaction (SQLite: ``BEGIN IMMEDIATE``, the database's one writer at a time)."""
    with engine.connect() as conn:
        conn.execution_options(iez_write=True)
        with conn.begin():
            yield conn


T = TypeVar("T")
log = logging.getLogger(__name__)


def write(engine: Engine, body: Callable[[Connection], T], attempts: int = WRITE_ATTEMPTS,
          on_retry: Callable[[], None] | None = None) -> T:
    """``body(conn)`` in one :func:`transaction`, committed; run again on a new transaction when MariaDB/Galera
    refuses it so that it can be (:data:`iez.db.engine.RETRY_CODES`: a certification failure or deadlock 1213,
    a lock wait time-out 1205, a node not ready 1047), as :func:`iez.db.engine.write_transaction` does, with the
    same backoff and the same :class:`DatabaseUnavailable` after ``attempts``.

    Why not ``write_transaction`` itself: it takes iez's write lock (the ``iez_lock`` row), which every
    allocation writes. An ingest batch holds its transaction for seconds (100,000 records); under that lock
    every job's layout would wait for it, and on Galera every allocation would conflict with it. Nothing an
    allocation reads is written here, and two consumers of one changelog are serialised on their position row
    (:func:`lock_position`), which Galera certifies as well (two batches committed from two nodes write the same
    row: the later is refused and re-run, and then skips what the earlier applied). ``body`` must be
    re-runnable: it may not change anything outside ``conn`` before the commit; ``on_retry`` is called before
    each re-run to drop what it did change (e.g. the consumer's directory map)."""
    for attempt in range(1, attempts + 1):
        try:
            with transaction(engine) as conn:
                return body(conn)
        except Exception as err:  # SQLAlchemy's DBAPIError, or the driver's own (the raw cursor: statement text, a Sender)
            raw = err.orig if isinstance(err, DBAPIError) else err
            code = error_code(raw) if type(raw).__module__.startswith("MySQLdb") else None
            if code not in RETRY_CODES:
                raise
            if on_retry is not None:
                on_retry()
            if attempt == attempts:
                raise DatabaseUnavailable(f"interaction DB {describe(engine.url)} refused an inventory write "
                                          f"{attempts} times in a row (MariaDB error {code})") from err
            write_retries.add(1)
            log.debug("inventory write refused (MariaDB error %s), attempt %d of %d: trying again", code, attempt,
                      attempts)
            time.sleep(retry_delay(attempt))
    raise AssertionError("unreachable")


def _chunks(rows: Sequence[Any], size: int) -> Iterator[Sequence[Any]]:
    for n in range(0, len(rows), size):
        yield rows[n:n + size]


def _keyed(rows: Iterable[tuple]) -> list[tuple]:
    """Rows in key order (keys lead every row): InnoDB fills its clustered index page by page. Sorted by FID
    alone (a third of the time of ``(fid, seq)`` pairs): it is the whole key of a file or directory row, and a
    file's objects come in ``seq`` order, which the sort keeps (it is stable)."""
    return sorted(rows, key=itemgetter(0))


def _run(db: Any, statements: Iterable[str], send: Send | None) -> None:
    if send is None:
        sql.run_text(db, statements)
        return
    for statement in statements:  # a Sender's thread runs them, in order, while the caller goes on
        send(statement)


def _put(conn: Connection, table: str, rows: list[tuple], send: Send | None = None) -> None:
    """Upsert rows of ``inv_files`` or ``inv_dirs`` (tuples in :data:`iez.db.inventory.COLUMNS` order)."""
    if not rows:
        return
    if is_sqlite(conn):
        for part in _chunks(rows, SQLITE_ROWS):
            sql.upsert_rows(conn, table, part)
        return
    db = sql.driver(conn)
    _run(db, (sql.upsert_text(db, table, part) for part in _chunks(_keyed(rows), TEXT_ROWS)), send)


def _delete(conn: Connection, table: str, fids: list[str], send: Send | None = None) -> None:
    if send is None or not fids:
        sql.delete_keys(conn, table, fids)
        return
    db = sql.driver(conn)
    _run(db, (sql.delete_text(db, table, part) for part in _chunks(fids, TEXT_ROWS)), send)


def put_files(conn: Connection, rows: list[dict], objects: dict[str, list[tuple[int, int]]],
              existing: set[str] | None = None, unchanged: set[str] | frozenset[str] = frozenset(),
              send: Send | None = None) -> None:
    """Write file rows (every column of :data:`FILE_COLUMNS`) and replace their stripe objects (``existing``:
    the files that may have objects already, when the caller knows; the others have none to delete). The
    objects of the files in ``unchanged`` are left as they are: the caller knows their stored size and layout
    are the row's, and the objects are a function of the two. ``send``: a MariaDB :class:`Sender`'s, which
    runs the statements while the caller goes on (its ``close`` says whether they all ran)."""
    if not rows:
        return
    fids = [r["fid"] for r in rows]
    if unchanged:
        fids = [f for f in fids if f not in unchanged]
    _delete(conn, "inv_objects", fids if existing is None else [f for f in fids if f in existing], send)
    objs = [(fid, seq, ost, nbytes) for fid in fids for seq, (ost, nbytes) in enumerate(objects.get(fid, ()))]
    _put(conn, "inv_files", list(map(itemgetter(*FILE_COLUMNS), rows)), send)
    if is_sqlite(conn):
        for part in _chunks(objs, SQLITE_ROWS):
            sql.insert_objects(conn, part)
        return
    db = sql.driver(conn)
    _run(db, (sql.objects_text(db, part) for part in _chunks(_keyed(objs), TEXT_ROWS)), send)


class Sender:
    """MariaDB: statements run in order by one thread on the transaction's own connection, while the thread
    that sends them builds the next (the server's work, about 40 % of an ingest, overlaps ours; the driver
    releases the GIL while it waits). Nothing else may use the connection until :meth:`close`, which waits
    for every statement and raises the first one's error (the rest are then not run); a failed statement
    stops those after it, and :meth:`send` raises its error at once."""

    def __init__(self, conn: Connection):
        self.db = sql.driver(conn)
        self.todo: queue.Queue = queue.Queue(maxsize=8)
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._run, name="iez-inventory-sql", daemon=True)
        self.thread.start()

    def _run(self) -> None:
        cursor = self.db.cursor()
        try:
            while (sql := self.todo.get()) is not None:
                if self.error is None:
                    try:
                        cursor.execute(sql)  # no arguments: the driver does not %-format the text
                    except BaseException as err:
                        self.error = err
        finally:
            cursor.close()

    def send(self, sql: str) -> None:
        if self.error is not None:
            raise self.error
        self.todo.put(sql)

    def close(self) -> None:
        self.todo.put(None)
        self.thread.join()
        if self.error is not None:
            raise self.error


def delete_files(conn: Connection, fids: Iterable[str], send: Send | None = None) -> None:
    fids = list(fids)
    _delete(conn, "inv_objects", fids, send)
    _delete(conn, "inv_files", fids, send)


def put_dirs(conn: Connection, rows: list[dict]) -> None:
    _put(conn, "inv_dirs", list(map(itemgetter(*DIR_COLUMNS), rows)))


def delete_dirs(conn: Connection, fids: Iterable[str]) -> None:
    _delete(conn, "inv_dirs", list(fids))


class Paths:
    """Directory FID → path, from ``inv_dirs`` (a root's row: no parent, its absolute path as name)."""

    def __init__(self) -> None:
        self.dirs: dict[str, tuple[str | None, str, int | None]] = {}  # fid -> (parent, name, root_id)
        self._cache: dict[str, str] = {}

    @classmethod
    def load(cls, conn: Connection) -> "Paths":
        out = cls()
        for fid, parent, name, root_id in sql.dir_rows(conn):
            out.dirs[fid] = (parent, name, root_id)
        return out

    def set(self, fid: str, parent: str | None, name: str, root_id: int | None) -> None:
        old = self.dirs.get(fid)
        self.dirs[fid] = (parent, name, root_id)
        if old is not None and old[:2] != (parent, name):
            self._cache.clear()  # a directory moved: every path below it changes

    def remove(self, fid: str) -> None:
        if self.dirs.pop(fid, None) is not None:
            self._cache.clear()

    def root_of(self, fid: str) -> int | None:
        entry = self.dirs.get(fid)
        return entry[2] if entry else None

    def path(self, fid: str) -> str | None:
        """The directory's absolute path, or None when it (or a parent) is not in the inventory."""
        hit = self._cache.get(fid)
        if hit is not None:
            return hit
        parts, seen, at = [], set(), fid
        while True:
            entry = self.dirs.get(at)
            if entry is None or at in seen:
                return None
            seen.add(at)
            parent, name, _ = entry
            parts.append(name)
            if parent is None:
                break
            at = parent
        out = "/".join(reversed(parts))
        self._cache[fid] = out
        return out

    def children(self) -> dict[str, list[str]]:
        out: dict[str, list[str]] = {}
        for fid, (parent, _, _) in self.dirs.items():
            if parent is not None:
                out.setdefault(parent, []).append(fid)
        return out

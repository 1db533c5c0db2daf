"""Writing the inventory: batched upserts and deletes in one transaction, and paths resolved from directories.

Rows go in batches with the database's own upsert (SQLite: ``executemany`` of one prepared ``ON CONFLICT DO
UPDATE``; MariaDB: multi-row ``ON DUPLICATE KEY UPDATE`` text built by :func:`_insert_text`, in key order):
a record applied twice leaves the same row, which is what makes a replay after a crash harmless. Every
transaction goes through :func:`write`, which re-runs it when Galera refuses it. A file's stripe objects are replaced whole
whenever its row is written. Inventory writes do not take the allocation lock (``iez_lock``): nothing an
allocation reads is written here, and one consumer per changelog is serialised on its position row instead
(:func:`lock_position`), so ingesting a changelog never delays a job's layout.
"""

from __future__ import annotations

import json
import logging
import queue
import re
import threading
import time
from contextlib import contextmanager
from operator import itemgetter
from typing import Callable, Iterable, Iterator, TypeVar

from sqlalchemy import Connection, Engine, delete, func, select, update
from sqlalchemy.exc import DBAPIError

from iez.config import describe
from iez.db.engine import (
    RETRY_CODES,
    WRITE_ATTEMPTS,
    DatabaseUnavailable,
    error_code,
    is_sqlite,
    retry_delay,
    write_retries,
)
from iez.db.models import path_hash, utcnow
from iez.inventory.tables import InvChangelog, InvDir, InvFile, InvObject, InvRoot

Send = Callable[[str], None]

#: Rows per statement: SQLite allows 32766 bound parameters, and a file row has 16.
CHUNK = 1500
FILE_COLUMNS = ("fid", "parent", "name", "root_id", "size", "layout", "uid", "gid", "mode", "nlink", "ino",
                "mtime_ns", "ctime_ns", "atime_ns", "stale", "gen")
DIR_COLUMNS = ("fid", "parent", "name", "root_id", "gen")


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
        except Exception as err:  # SQLAlchemy's DBAPIError, or the driver's own (the raw cursor of _insert_text)
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


def _chunks(rows: list, size: int = CHUNK) -> Iterator[list]:
    for n in range(0, len(rows), size):
        yield rows[n:n + size]


def _upsert(conn: Connection, table, rows: list[dict], columns: tuple[str, ...], keys: tuple[str, ...]) -> None:
    """One multi-row upsert per chunk, through the driver (no per-row statement compilation)."""
    if not rows:
        return
    changing = [c for c in columns if c not in keys]
    values = list(map(itemgetter(*columns), rows)) if len(columns) > 1 else [(r[columns[0]],) for r in rows]
    if is_sqlite(conn):
        names = ", ".join(f'"{c}"' for c in columns)
        sql = (f"INSERT INTO {table.name} ({names}) VALUES ({', '.join('?' * len(columns))}) "
               f"ON CONFLICT ({', '.join(keys)}) DO UPDATE SET " + ", ".join(f'"{c}" = excluded."{c}"' for c in changing))
        for part in _chunks(values, 5000):
            conn.exec_driver_sql(sql, part)
        return
    names = ", ".join(f"`{c}`" for c in columns)
    _insert_text(conn, f"INSERT INTO {table.name} ({names}) VALUES ",
                 " ON DUPLICATE KEY UPDATE " + ", ".join(f"`{c}` = VALUES(`{c}`)" for c in changing), values)


def _insert_text(conn: Connection, head: str, tail: str, values: list[tuple], send: Send | None = None) -> None:
    """MariaDB: multi-row INSERTs whose text we build ourselves, 2,000 rows a statement. mysqlclient's own
    ``executemany`` builds the same text but quotes every value through Python converters (``literal``:
    measured 60 % of a 100,000-file ingest). Here the literals are made a column at a time
    (:func:`_column_literals`): a column of ints is ``str()`` of each, a column of strings with no character
    SQL quotes (FIDs, most names) is wrapped in quotes, and anything else goes through the driver's C
    ``string_literal`` on the connection's character set, so the statement is the same as the driver's."""
    if not values:
        return
    db = conn.connection.dbapi_connection
    values = sorted(values, key=itemgetter(0, 1))  # in key order (keys lead every row): InnoDB fills its clustered index page by page
    if send is not None:  # a Sender's thread runs them, in order, while the caller goes on
        for part in _chunks(values, 2000):
            columns = [_column_literals(db, column) for column in zip(*part)]
            send(head + ",".join(["(" + ",".join(row) + ")" for row in zip(*columns)]) + tail)
        return
    cursor = db.cursor()
    try:
        for part in _chunks(values, 2000):
            columns = [_column_literals(db, column) for column in zip(*part)]
            text = ",".join(["(" + ",".join(row) + ")" for row in zip(*columns)])
            cursor.execute(head + text + tail)  # no arguments: the driver does not %-format the text
    finally:
        cursor.close()


#: Characters a plain quoted literal may not hold as they are (MariaDB's escapes, and non-ASCII, which the
#: driver encodes on the connection's character set).
_NEEDS_ESCAPE = re.compile(r"[^\x20-\x26\x28-\x5b\x5d-\x7e]")


def _column_literals(db, column: tuple) -> list[str]:
    """SQL literals for one column's values (see :func:`_insert_text`)."""
    kinds = set(map(type, column))
    if kinds == {int}:
        return list(map(str, column))
    if kinds == {str} and _NEEDS_ESCAPE.search("".join(column)) is None:
        return ["'" + v + "'" for v in column]
    encoding, quote = db.encoding, db.string_literal

    def lit(v) -> str:
        if v is None:
            return "NULL"
        if isinstance(v, str):
            return quote(v.encode(encoding)).decode(encoding)
        if isinstance(v, int):
            return str(int(v))  # int(): a bool or an int subclass prints as a number
        return db.literal(v).decode(encoding)

    return [lit(v) for v in column]


def _delete_in(conn: Connection, table: str, column: str, keys: list, send: Send | None = None) -> None:
    if send is not None and keys:
        db = conn.connection.dbapi_connection
        for part in _chunks(keys, 2000):
            send(f"DELETE FROM {table} WHERE {column} IN ({','.join(_column_literals(db, tuple(part)))})")
        return
    mark = "?" if is_sqlite(conn) else "%s"
    for part in _chunks(keys, 900):
        conn.exec_driver_sql(f"DELETE FROM {table} WHERE {column} IN ({', '.join([mark] * len(part))})", tuple(part))


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
    _delete_in(conn, "inv_objects", "fid", fids if existing is None else [f for f in fids if f in existing], send)
    objs = [(fid, seq, ost, nbytes) for fid in fids for seq, (ost, nbytes) in enumerate(objects.get(fid, ()))]
    if not is_sqlite(conn):
        columns = FILE_COLUMNS
        _insert_text(conn, f"INSERT INTO inv_files ({', '.join(f'`{c}`' for c in columns)}) VALUES ",
                     " ON DUPLICATE KEY UPDATE " + ", ".join(f"`{c}` = VALUES(`{c}`)" for c in columns[1:]),
                     list(map(itemgetter(*columns), rows)), send)
        _insert_text(conn, "INSERT INTO inv_objects (fid, seq, ost, bytes) VALUES ", "", objs, send)
        return
    _upsert(conn, InvFile.__table__, rows, FILE_COLUMNS, ("fid",))
    for part in _chunks(objs, 5000):
        conn.exec_driver_sql("INSERT INTO inv_objects (fid, seq, ost, bytes) VALUES (?, ?, ?, ?)", part)


class Sender:
    """MariaDB: statements run in order by one thread on the transaction's own connection, while the thread
    that sends them builds the next (the server's work, about 40 % of an ingest, overlaps ours; the driver
    releases the GIL while it waits). Nothing else may use the connection until :meth:`close`, which waits
    for every statement and raises the first one's error (the rest are then not run); a failed statement
    stops those after it, and :meth:`send` raises its error at once."""

    def __init__(self, conn: Connection):
        self.db = conn.connection.dbapi_connection
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
    _delete_in(conn, "inv_objects", "fid", fids, send)
    _delete_in(conn, "inv_files", "fid", fids, send)


def put_dirs(conn: Connection, rows: list[dict]) -> None:
    _upsert(conn, InvDir.__table__, rows, DIR_COLUMNS, ("fid",))


def delete_dirs(conn: Connection, fids: Iterable[str]) -> None:
    for part in _chunks(list(fids)):
        conn.execute(delete(InvDir.__table__).where(InvDir.fid.in_(part)))


def mark_stale(conn: Connection, fids: Iterable[str], stale: int = 1) -> None:
    for part in _chunks(list(fids)):
        conn.execute(update(InvFile.__table__).where(InvFile.fid.in_(part)).values(stale=stale))


class Paths:
    """Directory FID → path, from ``inv_dirs`` (a root's row: no parent, its absolute path as name)."""

    def __init__(self):
        self.dirs: dict[str, tuple[str | None, str, int]] = {}  # fid -> (parent, name, root_id)
        self._cache: dict[str, str] = {}

    @classmethod
    def load(cls, conn: Connection) -> "Paths":
        out = cls()
        for fid, parent, name, root_id in conn.execute(select(InvDir.fid, InvDir.parent, InvDir.name, InvDir.root_id)):
            out.dirs[fid] = (parent, name, root_id)
        return out

    def set(self, fid: str, parent: str | None, name: str, root_id: int) -> None:
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


# -- roots and changelog positions ------------------------------------------------------------------------------


def ensure_root(conn: Connection, path: str, fid: str) -> tuple[int, int]:
    """The root's id and its next scan generation (the root row is created the first time)."""
    key = path_hash(path)
    row = conn.execute(select(InvRoot.id, InvRoot.generation).where(InvRoot.path_hash == key)).first()
    if row is None:
        conn.execute(InvRoot.__table__.insert().values(path_hash=key, path=path, fid=fid, generation=1))
        root_id = conn.execute(select(InvRoot.id).where(InvRoot.path_hash == key)).scalar_one()
        return root_id, 1
    conn.execute(update(InvRoot.__table__).where(InvRoot.id == row.id).values(generation=row.generation + 1, fid=fid))
    return row.id, row.generation + 1


def finish_root(conn: Connection, root_id: int, gen: int, seconds: float) -> tuple[int, int]:
    """After a scan of generation ``gen``: drop what it did not see, note when; ``(files, dirs)`` dropped."""
    gone = [fid for (fid,) in conn.execute(select(InvFile.fid).where(InvFile.root_id == root_id, InvFile.gen < gen))]
    delete_files(conn, gone)
    dirs = conn.execute(delete(InvDir.__table__).where(InvDir.root_id == root_id, InvDir.gen < gen)).rowcount
    conn.execute(update(InvRoot.__table__).where(InvRoot.id == root_id).values(scanned=utcnow(), scan_s=seconds))
    return len(gone), dirs


def seeded_roots(conn: Connection) -> dict[str, dict]:
    """Every root a scan completed: path → ``{id, fid, scanned, scan_s}``."""
    rows = conn.execute(select(InvRoot.id, InvRoot.path, InvRoot.fid, InvRoot.scanned, InvRoot.scan_s)
                        .where(InvRoot.scanned.is_not(None)))
    return {r.path: {"id": r.id, "fid": r.fid, "scanned": r.scanned, "scan_s": r.scan_s} for r in rows}


def lock_position(conn: Connection, mdt: str, user: str, roots: list[str]) -> int:
    """The consumer's committed position, its row locked for this transaction (created at 0 the first time)."""
    table = InvChangelog.__table__
    query = select(InvChangelog.position).where(InvChangelog.mdt == mdt, InvChangelog.user == user)
    if not is_sqlite(conn):
        query = query.with_for_update()
    position = conn.execute(query).scalar()
    if position is None:
        conn.execute(table.insert().values(mdt=mdt, user=user, position=0, records=0, rescans=0,
                                           roots=json.dumps(roots), updated=utcnow()))
        position = conn.execute(query).scalar()
    return position


def save_position(conn: Connection, mdt: str, user: str, position: int, records: int, rescans: int = 0,
                  note: str | None = None) -> None:
    values = {"position": position, "updated": utcnow(), "records": InvChangelog.records + records,
              "rescans": InvChangelog.rescans + rescans}
    if note is not None:
        values["note"] = note
    conn.execute(update(InvChangelog.__table__).where(InvChangelog.mdt == mdt, InvChangelog.user == user)
                 .values(**values))


def summary(conn: Connection) -> dict:
    """What ``iez inventory show`` prints: counts, bytes per OST, roots, changelog positions and their age."""
    now = utcnow()
    files = conn.execute(select(func.count(), func.coalesce(func.sum(InvFile.size), 0))).one()
    stale = conn.execute(select(func.count()).where(InvFile.stale == 1)).scalar()
    dirs = conn.execute(select(func.count()).select_from(InvDir)).scalar()
    per_ost = [{"ost": ost, "objects": n, "bytes": int(b)} for ost, n, b in conn.execute(
        select(InvObject.ost, func.count(), func.sum(InvObject.bytes)).group_by(InvObject.ost).order_by(InvObject.ost))]
    roots = [{"path": r.path, "scanned": r.scanned.isoformat() if r.scanned else None,
              "scan_s": r.scan_s, "age_s": round((now - r.scanned).total_seconds(), 1) if r.scanned else None}
             for r in conn.execute(select(InvRoot.__table__).order_by(InvRoot.path))]
    logs = [{"mdt": c.mdt, "user": c.user, "position": c.position, "records": c.records, "rescans": c.rescans,
             "roots": json.loads(c.roots or "[]"), "note": c.note,
             "updated": c.updated.isoformat() if c.updated else None,
             "age_s": round((now - c.updated).total_seconds(), 1) if c.updated else None}
            for c in conn.execute(select(InvChangelog.__table__).order_by(InvChangelog.mdt, InvChangelog.user))]
    return {"files": files[0], "bytes": int(files[1]), "dirs": dirs, "stale_files": stale, "per_ost": per_ost,
            "roots": roots, "changelogs": logs}

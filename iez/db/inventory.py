"""The file inventory's statements (:mod:`iez.inventory`, docs/inventory.md): what its scan, its changelog
consumer, ``iez inventory show`` and the plans read from it and write to it, each a function of a connection.

The ingest's bulk writes come in two forms. SQLite: one prepared statement run by ``executemany`` per part
(:func:`upsert_rows`, :func:`insert_objects`, :func:`delete_keys`). MariaDB: the text of one multi-row
statement (:func:`upsert_text`, :func:`objects_text`, :func:`delete_text`) with every value written as a
literal here (:func:`literals`), for the caller to run on the transaction's own connection, in this thread
(:func:`run_text`) or in a thread of its own (:class:`iez.inventory.store.Sender`). What to write, in which
order and how many rows a statement holds is the caller's (:mod:`iez.inventory.store`).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Iterator, Sequence
from datetime import datetime
from typing import Any

from sqlalchemy import Connection, delete, func, insert, or_, select, update
from sqlalchemy.sql import Select

from iez.db.engine import is_sqlite
from iez.db.models import path_hash, utcnow
from iez.inventory.tables import InvChangelog, InvDir, InvFile, InvObject, InvRoot

#: A file row's columns, in the order of the tuples the write functions take (``fid``, the key, first).
FILE_COLUMNS = ("fid", "parent", "name", "root_id", "size", "layout", "uid", "gid", "mode", "nlink", "ino",
                "mtime_ns", "ctime_ns", "atime_ns", "stale", "gen")
#: A directory row's columns, likewise.
DIR_COLUMNS = ("fid", "parent", "name", "root_id", "gen")
#: A stripe object row's columns, likewise (the key is ``(fid, seq)``).
OBJECT_COLUMNS = ("fid", "seq", "ost", "bytes")
#: Tables whose rows the bulk writes take, and their columns.
COLUMNS = {"inv_files": FILE_COLUMNS, "inv_dirs": DIR_COLUMNS, "inv_objects": OBJECT_COLUMNS}
#: Keys a SQLite statement binds at most here (SQLite's limit on bound parameters is far above it).
SQLITE_KEYS = 900
#: A file row as :func:`stored_files` reads it: fid, parent, name, size, layout, stale.
Stored = tuple[str, str, str, int, "str | None", int]
#: A file row as the plans read it (:func:`file_rows`): fid, parent, name, size, layout, nlink, ino, mtime_ns.
PlanRow = tuple[str, str, str, int, "str | None", int, int, int]


def driver(conn: Connection) -> Any:
    """The DBAPI connection under ``conn`` (mysqlclient's, on MariaDB: its quoting and cursors are used here)."""
    return conn.connection.dbapi_connection


# -- SQLite: prepared statements ----------------------------------------------------------------------------------


def _check(table: str) -> tuple[str, ...]:
    if table not in COLUMNS:
        raise ValueError(f"not an inventory table with bulk writes: {table}")
    return COLUMNS[table]


def upsert_rows(conn: Connection, table: str, rows: Sequence[tuple]) -> None:
    """SQLite: insert or replace the rows (tuples in :data:`COLUMNS` order) of ``inv_files`` or ``inv_dirs``."""
    columns = _check(table)
    names = ", ".join(f'"{c}"' for c in columns)
    sql = (f"INSERT INTO {table} ({names}) VALUES ({', '.join('?' * len(columns))}) ON CONFLICT (fid) DO UPDATE SET "
           + ", ".join(f'"{c}" = excluded."{c}"' for c in columns[1:]))
    conn.exec_driver_sql(sql, list(rows))


def insert_objects(conn: Connection, rows: Sequence[tuple[str, int, int, int]]) -> None:
    """SQLite: add stripe object rows ``(fid, seq, ost, bytes)``."""
    conn.exec_driver_sql("INSERT INTO inv_objects (fid, seq, ost, bytes) VALUES (?, ?, ?, ?)", list(rows))


def delete_keys(conn: Connection, table: str, fids: Sequence[str]) -> None:
    """Delete the rows of ``table`` (``inv_files``, ``inv_objects`` or ``inv_dirs``) of these FIDs, bound as
    parameters (either database; :data:`SQLITE_KEYS` a statement)."""
    _check(table)
    mark = "?" if is_sqlite(conn) else "%s"
    for n in range(0, len(fids), SQLITE_KEYS):
        part = tuple(fids[n:n + SQLITE_KEYS])
        conn.exec_driver_sql(f"DELETE FROM {table} WHERE fid IN ({', '.join([mark] * len(part))})", part)


# -- MariaDB: statement text ----------------------------------------------------------------------------------------

#: Characters a plain quoted literal may not hold as they are (MariaDB's escapes, and non-ASCII, which the
#: driver encodes on the connection's character set).
_NEEDS_ESCAPE = re.compile(r"[^\x20-\x26\x28-\x5b\x5d-\x7e]")


def literals(db: Any, column: Sequence) -> list[str]:
    """SQL literals for one column's values, on mysqlclient connection ``db``. mysqlclient's own
    ``executemany`` builds the same text but quotes every value through Python converters (``literal``:
    measured 60 % of a 100,000-file ingest); here a column of ints is ``str()`` of each, a column of strings
    with no character SQL quotes (FIDs, most names) is wrapped in quotes, and anything else goes through the
    driver's C ``string_literal`` on the connection's character set, so the text is the driver's."""
    kinds = set(map(type, column))
    if kinds == {int}:
        return list(map(str, column))
    if kinds == {str} and _NEEDS_ESCAPE.search("".join(column)) is None:
        return ["'" + v + "'" for v in column]
    encoding, quote = db.encoding, db.string_literal

    def lit(v: object) -> str:
        if v is None:
            return "NULL"
        if isinstance(v, str):
            return quote(v.encode(encoding)).decode(encoding)
        if isinstance(v, int):
            return str(int(v))  # int(): a bool or an int subclass prints as a number
        return db.literal(v).decode(encoding)

    return [lit(v) for v in column]


def _values(db: Any, rows: Sequence[tuple]) -> str:
    columns = list(zip(*rows))
    formats = []
    for column in columns:  # the usual rows: every column all ints or all strings SQL quotes as they are
        kinds = set(map(type, column))
        if kinds == {int}:
            formats.append("%d")
        elif kinds == {str} and _NEEDS_ESCAPE.search("".join(column)) is None:
            formats.append("'%s'")
        else:
            break
    else:  # each row %-formatted in C at once: 1.7 us a 16-column row, against 3.2 a column of literals at a time
        row = "(" + ",".join(formats) + ")"
        return ",".join([row % values for values in rows])
    texts = [literals(db, column) for column in columns]
    return ",".join(["(" + ",".join(row) + ")" for row in zip(*texts)])


def upsert_text(db: Any, table: str, rows: Sequence[tuple]) -> str:
    """MariaDB: one ``INSERT ... ON DUPLICATE KEY UPDATE`` of these ``inv_files`` or ``inv_dirs`` rows."""
    columns = _check(table)
    return (f"INSERT INTO {table} ({', '.join(f'`{c}`' for c in columns)}) VALUES " + _values(db, rows)
            + " ON DUPLICATE KEY UPDATE " + ", ".join(f"`{c}` = VALUES(`{c}`)" for c in columns[1:]))


def objects_text(db: Any, rows: Sequence[tuple[str, int, int, int]]) -> str:
    """MariaDB: one ``INSERT`` of these stripe object rows."""
    return "INSERT INTO inv_objects (fid, seq, ost, bytes) VALUES " + _values(db, rows)


def delete_text(db: Any, table: str, fids: Sequence[str]) -> str:
    """MariaDB: one ``DELETE`` of the rows of ``table`` of these FIDs."""
    _check(table)
    return f"DELETE FROM {table} WHERE fid IN ({','.join(literals(db, fids))})"


def run_text(db: Any, statements: Iterable[str]) -> None:
    """Run statements made here on ``db``, in order (no arguments: the driver does not %-format the text)."""
    cursor = db.cursor()
    try:
        for sql in statements:
            cursor.execute(sql)
    finally:
        cursor.close()


# -- what the consumer reads and marks ------------------------------------------------------------------------------


def dir_rows(conn: Connection) -> Iterator[tuple[str, str | None, str, int]]:
    """Every directory row: ``(fid, parent, name, root_id)``."""
    for fid, parent, name, root_id in conn.execute(select(InvDir.fid, InvDir.parent, InvDir.name, InvDir.root_id)):
        yield fid, parent, name, root_id


def scan_generations(conn: Connection) -> tuple[int, int]:
    """The sum of the roots' scan generations and their count: either changes when a scan has run."""
    total, count = conn.execute(select(func.sum(InvRoot.generation), func.count())).one()
    return int(total or 0), int(count)


def files_below(conn: Connection, parents: Sequence[str]) -> set[str]:
    """The FIDs of the files whose parent is one of ``parents``."""
    out: set[str] = set()
    for n in range(0, len(parents), SQLITE_KEYS):
        part = list(parents[n:n + SQLITE_KEYS])
        out.update(conn.execute(select(InvFile.fid).where(InvFile.parent.in_(part))).scalars())
    return out


def stale_files(conn: Connection) -> set[str]:
    """The FIDs of the files marked stale."""
    return set(conn.execute(select(InvFile.fid).where(InvFile.stale == 1)).scalars())


#: Keys a MariaDB ``SELECT ... IN`` of :func:`stored_files` holds (its text built here: no driver quoting).
STORED_KEYS = 5000


def stored_files(conn: Connection, fids: Sequence[str]) -> Iterator[Stored]:
    """``(fid, parent, name, size, layout, stale)`` of those of ``fids`` the inventory holds (through the
    driver: no statement compiled per part; on MariaDB the keys are literals made here, see :func:`literals`)."""
    head = "SELECT fid, parent, name, size, layout, stale FROM inv_files WHERE fid IN "
    if is_sqlite(conn):
        for n in range(0, len(fids), SQLITE_KEYS):
            part = tuple(fids[n:n + SQLITE_KEYS])
            yield from conn.exec_driver_sql(head + f"({', '.join('?' * len(part))})", part)  # rows are tuples
        return
    db = driver(conn)
    cursor = db.cursor()
    try:
        for n in range(0, len(fids), STORED_KEYS):
            cursor.execute(head + "(" + ",".join(literals(db, fids[n:n + STORED_KEYS])) + ")")
            yield from cursor.fetchall()
    finally:
        cursor.close()


def mark_stale(conn: Connection, fids: Sequence[str], stale: int = 1) -> None:
    for n in range(0, len(fids), SQLITE_KEYS):
        conn.execute(update(InvFile).where(InvFile.fid.in_(list(fids[n:n + SQLITE_KEYS]))).values(stale=stale))


def rename_file(conn: Connection, fid: str, parent: str, name: str) -> None:
    conn.execute(update(InvFile).where(InvFile.fid == fid).values(parent=parent, name=name))


# -- roots and changelog positions ----------------------------------------------------------------------------------


def ensure_root(conn: Connection, path: str, fid: str) -> tuple[int, int]:
    """The root's id and its next scan generation (the root row is created the first time)."""
    key = path_hash(path)
    row = conn.execute(select(InvRoot.id, InvRoot.generation).where(InvRoot.path_hash == key)).first()
    if row is None:
        conn.execute(insert(InvRoot).values(path_hash=key, path=path, fid=fid, generation=1))
        root_id = conn.execute(select(InvRoot.id).where(InvRoot.path_hash == key)).scalar_one()
        return root_id, 1
    conn.execute(update(InvRoot).where(InvRoot.id == row.id).values(generation=row.generation + 1, fid=fid))
    return row.id, row.generation + 1


def finish_root(conn: Connection, root_id: int, gen: int, seconds: float) -> tuple[int, int]:
    """After a scan of generation ``gen``: drop what it did not see, note when; ``(files, dirs)`` dropped."""
    gone = list(conn.execute(select(InvFile.fid).where(InvFile.root_id == root_id, InvFile.gen < gen)).scalars())
    delete_keys(conn, "inv_objects", gone)
    delete_keys(conn, "inv_files", gone)
    dirs = conn.execute(delete(InvDir).where(InvDir.root_id == root_id, InvDir.gen < gen)).rowcount
    conn.execute(update(InvRoot).where(InvRoot.id == root_id).values(scanned=utcnow(), scan_s=seconds))
    return len(gone), dirs


def seeded_roots(conn: Connection) -> dict[str, dict]:
    """Every root a scan completed: path → ``{id, fid, scanned, scan_s}``."""
    rows = conn.execute(select(InvRoot.id, InvRoot.path, InvRoot.fid, InvRoot.scanned, InvRoot.scan_s)
                        .where(InvRoot.scanned.is_not(None)))
    return {r.path: {"id": r.id, "fid": r.fid, "scanned": r.scanned, "scan_s": r.scan_s} for r in rows}


def lock_position(conn: Connection, mdt: str, user: str, roots: list[str]) -> int:
    """The consumer's committed position, its row locked for this transaction (created at 0 the first time)."""
    query = select(InvChangelog.position).where(InvChangelog.mdt == mdt, InvChangelog.user == user)
    if not is_sqlite(conn):
        query = query.with_for_update()
    position = conn.execute(query).scalar()
    if position is None:
        conn.execute(insert(InvChangelog).values(mdt=mdt, user=user, position=0, records=0, rescans=0,
                                                 roots=json.dumps(roots), updated=utcnow()))
        position = conn.execute(query).scalar_one()
    return position


def save_position(conn: Connection, mdt: str, user: str, position: int, records: int, rescans: int = 0,
                  note: str | None = None) -> None:
    values: dict[str, object] = {"position": position, "updated": utcnow(),
                                 "records": InvChangelog.records + records, "rescans": InvChangelog.rescans + rescans}
    if note is not None:
        values["note"] = note
    conn.execute(update(InvChangelog).where(InvChangelog.mdt == mdt, InvChangelog.user == user).values(**values))


def is_followed(conn: Connection, mdt: str | None = None, user: str | None = None) -> bool:
    """Whether a changelog consumer has a position (that of ``mdt``/``user``, when given)."""
    query = select(InvChangelog.position)
    if mdt is not None:
        query = query.where(InvChangelog.mdt == mdt, InvChangelog.user == user)
    return conn.execute(query.limit(1)).first() is not None


def changelog_times(conn: Connection) -> list[datetime]:
    """When each changelog position was last written."""
    return [t for t in conn.execute(select(InvChangelog.updated)).scalars() if t is not None]


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
             for r in conn.execute(select(InvRoot.path, InvRoot.scanned, InvRoot.scan_s).order_by(InvRoot.path))]
    logs = [{"mdt": c.mdt, "user": c.user, "position": c.position, "records": c.records, "rescans": c.rescans,
             "roots": json.loads(c.roots or "[]"), "note": c.note,
             "updated": c.updated.isoformat() if c.updated else None,
             "age_s": round((now - c.updated).total_seconds(), 1) if c.updated else None}
            for c in conn.execute(select(InvChangelog.mdt, InvChangelog.user, InvChangelog.position,
                                         InvChangelog.records, InvChangelog.rescans, InvChangelog.roots,
                                         InvChangelog.note, InvChangelog.updated)
                                  .order_by(InvChangelog.mdt, InvChangelog.user))]
    return {"files": files[0], "bytes": int(files[1]), "dirs": dirs, "stale_files": stale, "per_ost": per_ost,
            "roots": roots, "changelogs": logs}


# -- what the plans and drains read ----------------------------------------------------------------------------------


def tune_for_reads(conn: Connection) -> None:
    """SQLite: map the file and keep a large page cache (a plan's index range scans over a large inventory)."""
    if is_sqlite(conn):
        conn.exec_driver_sql("PRAGMA mmap_size=2147483648")
        conn.exec_driver_sql("PRAGMA cache_size=-262144")


def _scoped(query: Select, roots: Sequence[int] | None, join: bool = False) -> Select:
    """``query`` limited to the files of root ids ``roots`` (None: every file)."""
    if roots is None:
        return query
    if join:
        query = query.join(InvFile, InvFile.fid == InvObject.fid)
    return query.where(InvFile.root_id.in_(list(roots)))


def file_count(conn: Connection, roots: Sequence[int] | None) -> int:
    return conn.execute(_scoped(select(func.count()).select_from(InvFile), roots)).scalar_one()


_PLAN_COLUMNS = (InvFile.fid, InvFile.parent, InvFile.name, InvFile.size, InvFile.layout, InvFile.nlink, InvFile.ino,
                 InvFile.mtime_ns)


def _plan_rows(conn: Connection, query: Select) -> Iterator[Any]:
    yield from conn.execution_options(yield_per=20000).execute(query)  # streamed, rows as they are (tuples)


def file_rows(conn: Connection, roots: Sequence[int] | None) -> Iterator[Any]:
    """Every file of ``roots`` (None: all) as :data:`PlanRow`, in FID order, streamed."""
    return _plan_rows(conn, _scoped(select(*_PLAN_COLUMNS).order_by(InvFile.fid), roots))


def files_of(conn: Connection, fids: Sequence[str]) -> Iterator[Any]:
    """These files (:data:`SQLITE_KEYS` a statement) as :data:`PlanRow`."""
    for n in range(0, len(fids), SQLITE_KEYS):
        yield from _plan_rows(conn, select(*_PLAN_COLUMNS).where(InvFile.fid.in_(list(fids[n:n + SQLITE_KEYS]))))


def files_on(conn: Connection, osts: Iterable[int], roots: Sequence[int] | None) -> Iterator[Any]:
    """The files of ``roots`` (None: all) with an object on one of ``osts``, in FID order."""
    on = select(InvObject.fid).where(InvObject.ost.in_(sorted(osts))).distinct()
    return _plan_rows(conn, _scoped(select(*_PLAN_COLUMNS).where(InvFile.fid.in_(on)).order_by(InvFile.fid), roots))


def ost_totals(conn: Connection, roots: Sequence[int] | None) -> dict[int, int]:
    """Bytes of the stripe objects per OST (of the files of ``roots``; None: all)."""
    query = _scoped(select(InvObject.ost, func.sum(InvObject.bytes)).group_by(InvObject.ost), roots, join=True)
    return {ost: int(b) for ost, b in conn.execute(query)}


def largest_within(conn: Connection, ost: int, most: float, limit: int, roots: Sequence[int] | None
                   ) -> list[tuple[str, int]]:
    """``(fid, bytes)`` of the largest non-empty objects on ``ost`` of at most ``most`` bytes, largest first."""
    query = select(InvObject.fid, InvObject.bytes).where(InvObject.ost == ost, InvObject.bytes <= most,
                                                         InvObject.bytes > 0)
    query = _scoped(query, roots, join=True).order_by(InvObject.bytes.desc()).limit(limit)
    return [(fid, nbytes) for fid, nbytes in conn.execute(query)]


def smallest_above(conn: Connection, ost: int, least: float, limit: int, roots: Sequence[int] | None) -> list[str]:
    """FIDs of the smallest objects on ``ost`` of more than ``least`` bytes, smallest first."""
    query = select(InvObject.fid).where(InvObject.ost == ost, InvObject.bytes > least)
    return list(conn.execute(_scoped(query, roots, join=True).order_by(InvObject.bytes).limit(limit)).scalars())


def unmovable_count(conn: Connection, roots: Sequence[int] | None) -> int:
    """Files a plan cannot move whatever their layout says: none stored, more than one link, or mirrored."""
    query = select(func.count()).select_from(InvFile).where(
        or_(InvFile.layout.is_(None), InvFile.nlink > 1, InvFile.layout.like("version=3 %")))
    return conn.execute(_scoped(query, roots)).scalar_one()

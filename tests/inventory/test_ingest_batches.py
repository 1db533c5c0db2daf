"""Ingest in large batches keeps what record-by-record application gives, and a refused batch is re-run whole.

A batch looks at each changed file once, however many records name it (a file created, written, closed
and renamed in one batch is one ``lstat`` and one row), and a file created then unlinked in the same batch
is never looked at. That must end in the inventory the records give one at a time (``batch=1``), which
must also be the tree as it is.
"""

from __future__ import annotations

import os
import random
import threading
import time
from pathlib import Path

import pytest
from invtools import empty_followed, engine, held, inv_db, position, put, tree  # noqa: F401 - fixtures
from sqlalchemy import insert, select, text

from iez.db.engine import make_engine, write_retries
from iez.inventory import consumer, store
from iez.inventory.consumer import Consumer
from iez.inventory.emulated_mdt import EMULATED_USER, ChangelogWriter
from iez.inventory.readers import EmulatedChangelog
from iez.inventory.scan import scan
from iez.inventory.tables import InvChangelog, InvDir, InvFile, InvObject, InvRoot
from iez.layout import emulated
from iez.layout.model import Layout

MDT = "iezfs-MDT0000"
TABLES = (InvRoot, InvDir, InvFile, InvObject, InvChangelog)


def snapshot(engine) -> dict:
    with engine.connect() as conn:
        return {t.__tablename__: sorted((tuple(r) for r in conn.execute(select(t.__table__))), key=repr)
                for t in TABLES}


def restore(engine, rows: dict) -> None:
    with engine.begin() as conn:
        for t in reversed(TABLES):
            conn.execute(t.__table__.delete())
        for t in TABLES:
            cols = [c.name for c in t.__table__.columns]
            if rows[t.__tablename__]:
                conn.execute(insert(t.__table__), [dict(zip(cols, r)) for r in rows[t.__tablename__]])


def inventory(engine) -> tuple:
    """Every file row (all columns but the scan generation) and every stripe object."""
    with engine.connect() as conn:
        files = sorted(tuple(r) for r in conn.execute(select(*[c for c in InvFile.__table__.columns if c.name != "gen"])))
        objects = sorted(tuple(r) for r in conn.execute(select(InvObject.__table__)))
    return files, objects


def random_history(data: Path, rng: random.Random, steps: int) -> None:
    """Creates, rewrites, truncates, layout changes, renames (also over other files and across directories),
    unlinks (also of files just created), directories made, moved and removed."""
    dirs = [data]
    files: list[Path] = []
    for n in range(steps):
        op = rng.random()
        if op < 0.3 or not files:
            f = rng.choice(dirs) / f"f{n}"
            put(f, rng.randint(0, 3000), tuple(rng.sample(range(4), rng.randint(1, 3))), rng)
            files.append(f)
        elif op < 0.45:
            os.truncate(rng.choice(files), rng.randint(0, 5000))
        elif op < 0.55:
            f = rng.choice(files)
            os.setxattr(f, emulated.xattr_name(), emulated.format_attr(Layout(65536, (rng.randrange(4),))).encode())
        elif op < 0.7:
            f = files.pop(rng.randrange(len(files)))
            to = rng.choice(dirs) / (rng.choice(files).name if files and rng.random() < 0.3 else f"r{n}")
            if to.exists() and to != f:
                files.remove(to) if to in files else None
            os.rename(f, to)
            files.append(to)
        elif op < 0.82:
            os.unlink(files.pop(rng.randrange(len(files))))
        elif op < 0.9:
            d = rng.choice(dirs) / f"d{n}"
            d.mkdir()
            dirs.append(d)
        elif len(dirs) > 1:
            d = rng.choice(dirs[1:])
            inside = [f for f in files if d in f.parents]
            if rng.random() < 0.5:  # a directory removed with what it holds
                for f in inside:
                    os.unlink(f)
                    files.remove(f)
                for sub in sorted((x for x in dirs if d in x.parents or x == d), key=lambda p: -len(p.parts)):
                    os.rmdir(sub)
                    dirs.remove(sub)
            else:  # moved below the root: every path below it changes
                to = data / f"m{n}"
                os.rename(d, to)
                dirs = [to / x.relative_to(d) if (x == d or d in x.parents) else x for x in dirs]
                files = [to / f.relative_to(d) if d in f.parents else f for f in files]


@pytest.mark.slow
@pytest.mark.parametrize("seed", [1, 2, 3])
def test_one_large_batch_ends_where_records_applied_one_by_one_do(engine, tmp_path, seed, monkeypatch):
    rng = random.Random(seed)
    data = tmp_path / "data"
    for n in range(20):
        put(data / "s" / f"seed{n}", 100 * n, (n % 4,), rng)
    scan(engine, [str(data)], workers=1)
    before = snapshot(engine)
    log = tmp_path / "changelog"
    writer = ChangelogWriter([str(data)], log)
    random_history(data, rng, 400)
    writer.poll()
    writer.close()

    def run(batch: int) -> tuple:
        report = Consumer(engine, EmulatedChangelog(log, EMULATED_USER), MDT, EMULATED_USER, [str(data)],
                          batch=batch).run_once()
        assert report.rescans == 0 and report.position == writer.index
        return inventory(engine)

    one_by_one = run(1)
    assert held(engine) == tree(data)
    restore(engine, before)
    log.with_name(log.name + ".users").unlink()
    assert run(100_000) == one_by_one
    # batches of 37 records (a file's records split between batches: looked at again, its stripe objects kept
    # when its size and layout are as stored), the lines parsed by the child process 16 at a time
    restore(engine, before)
    log.with_name(log.name + ".users").unlink()
    monkeypatch.setattr(consumer, "BLOCK", 16)
    monkeypatch.setattr(consumer, "INLINE_BLOCKS", 1)
    assert run(37) == one_by_one


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["mariadb"])  # a lock wait time-out is MariaDB's (SQLite writers wait instead)
def test_a_batch_refused_by_the_database_is_run_again_whole(engine, tmp_path):
    """MariaDB: another transaction holds the consumer's position row past the lock wait time-out (1 s), so the
    batch is refused with error 1205 (as Galera refuses one with 1213), re-run, and applied once."""
    assert engine.dialect.name == "mysql"
    rng = random.Random(5)
    data, log, writer = empty_followed(engine, tmp_path)
    for n in range(50):
        put(data / f"f{n}", 10 * n, (n % 4,), rng)
    writer.poll()
    writer.close()
    impatient = make_engine(engine.url.update_query_dict({"init_command": "SET SESSION innodb_lock_wait_timeout=1"}))
    store.write(engine, lambda conn: store.lock_position(conn, MDT, EMULATED_USER, [str(data)]))  # the row, at 0
    holder = engine.connect()
    tx = holder.begin()
    holder.execute(text("SELECT position FROM inv_changelog WHERE mdt = :m FOR UPDATE"), {"m": MDT})
    threading.Timer(1.6, tx.commit).start()
    retries = write_retries.value
    started = time.monotonic()
    report = Consumer(impatient, EmulatedChangelog(log, EMULATED_USER), MDT, EMULATED_USER, [str(data)]).run_once()
    holder.close()
    impatient.dispose()
    assert write_retries.value > retries and time.monotonic() - started >= 1.0
    assert report.records == writer.index and held(engine) == tree(data)
    assert position(engine, MDT)[:2] == (writer.index, writer.index)  # applied once: its records counted once


@pytest.mark.parametrize("backend", ["mariadb"])  # the Sender is MariaDB's (SQLite statements run in place)
def test_a_statement_the_sender_runs_that_fails_is_raised_and_stops_those_after_it(engine):
    """The statements a store.Sender runs in its thread: in order, the first error raised by close (a
    transaction rolled back with it), none run after it."""
    from MySQLdb import MySQLError

    row = "('0x1:0x{}:0x0', 0, 1, 2)"
    with pytest.raises(MySQLError):
        with store.transaction(engine) as conn:
            sender = store.Sender(conn)
            sender.send("INSERT INTO inv_objects (fid, seq, ost, bytes) VALUES " + row.format(1))
            sender.send("INSERT INTO no_such_table VALUES (1)")
            sender.send("INSERT INTO inv_objects (fid, seq, ost, bytes) VALUES " + row.format(2))
            sender.close()
    with store.transaction(engine) as conn:
        sender = store.Sender(conn)
        for n in range(3, 6):
            sender.send("INSERT INTO inv_objects (fid, seq, ost, bytes) VALUES " + row.format(n))
        sender.close()
    with engine.connect() as conn:
        assert [f for (f,) in conn.execute(select(InvObject.fid).order_by(InvObject.fid))] == [
            "0x1:0x3:0x0", "0x1:0x4:0x0", "0x1:0x5:0x0"]


def test_a_stale_file_is_looked_at_again_only_when_a_batch_could_find_it(engine, tmp_path, monkeypatch):
    """A file not found where its records put it (stale) is looked at again with the first batch of a read,
    with a batch that moves a directory (one above it may be where it went) and with a batch naming it, not
    with the batches between: one record a batch, the lstat calls of its paths counted."""
    from iez.inventory.changelog import ZERO_FID, Record, fid_of_inode

    rng = random.Random(7)
    data = tmp_path / "data"
    (data / "d").mkdir(parents=True)
    scan(engine, [str(data)], workers=1)
    root, d = fid_of_inode(os.stat(data).st_ino), fid_of_inode(os.stat(data / "d").st_ino)
    put(data / "d" / "f", 3000, (1,), rng)
    put(data / "g", 100, (2,), rng)
    put(data / "h", 200, (3,), rng)
    f, g, h = (fid_of_inode(os.stat(p).st_ino) for p in (data / "d" / "f", data / "g", data / "h"))
    os.rename(data / "d", data / "e")  # before the consumer looks: d/f is not there, e/f is
    stamp = "12:00:00.000000000 2026.11.27"
    log = tmp_path / "changelog"

    def write(*records: Record) -> None:
        with open(log, "a") as out:
            out.writelines(r.to_line() + "\n" for r in records)

    write(Record(1, "CREAT", 0, f, stamp, d, "f"), Record(2, "CREAT", 0, g, stamp, root, "g"),
          Record(3, "CLOSE", 0, g, stamp))
    looked: list[str] = []
    real = consumer._lstat
    monkeypatch.setattr(consumer, "_lstat", lambda path: (looked.append(path), real(path))[1])

    def run() -> list[str]:
        looked.clear()
        report = Consumer(engine, EmulatedChangelog(log, EMULATED_USER), MDT, EMULATED_USER, [str(data)],
                          batch=1).run_once()
        assert report.rescans == 0
        return [p for p in looked if p.endswith("/f")]

    def stale_f() -> int:
        with engine.connect() as conn:
            return conn.execute(select(InvFile.stale).where(InvFile.fid == f)).scalar_one()

    # batch 1 looks at d/f (not there: stale); batches 2 and 3 (g's records) neither name f nor move a directory
    assert run() == [f"{data}/d/f"] and stale_f() == 1
    # the next read's first batch looks again (h's CREAT); then the directory's rename: e/f is found
    write(Record(4, "CREAT", 0, h, stamp, root, "h"), Record(5, "CLOSE", 0, h, stamp),
          Record(6, "RENME", 0, ZERO_FID, stamp, root, "e", d, root, "d"))
    assert run() == [f"{data}/d/f", f"{data}/e/f"]
    assert stale_f() == 0 and held(engine) == tree(data)

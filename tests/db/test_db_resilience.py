"""A MariaDB that drops our connections (as a restart does) costs no data and no manual step."""

from __future__ import annotations

import pytest
from sqlalchemy import create_engine, text

from iez.config import database_url
from iez.db.allocations import lookup, pin
from iez.db.engine import DatabaseUnavailable, make_engine, read


def kill_connections_of(engine) -> int:
    """Kill, from another connection, every server connection ``engine`` holds (what a restart does to them)."""
    with engine.connect() as conn:
        mine = conn.execute(text("SELECT CONNECTION_ID()")).scalar()
    admin = create_engine(engine.url)
    killed = 0
    with admin.connect() as conn:
        me = conn.execute(text("SELECT CONNECTION_ID()")).scalar()
        for (pid,) in conn.execute(text("SELECT ID FROM information_schema.PROCESSLIST WHERE DB = DATABASE()")):
            if pid != me:
                conn.execute(text(f"KILL CONNECTION {int(pid)}"))
                killed += 1
    admin.dispose()
    assert mine is not None
    return killed


@pytest.mark.parametrize("backend", ["mariadb"])
def test_reads_and_writes_survive_the_server_dropping_every_connection(db):
    engine = make_engine(database_url(db))
    pin(engine, "/lustre/kept", 65536, [4, 5])
    assert kill_connections_of(engine) >= 1
    assert read(engine, lambda c: lookup(c, "/lustre/kept"))["osts"] == [4, 5]
    kill_connections_of(engine)
    pin(engine, "/lustre/after", 65536, [6])  # a write right after needs no manual step either
    assert read(engine, lambda c: lookup(c, "/lustre/after"))["osts"] == [6]
    engine.dispose()


def test_an_unreachable_database_is_reported_in_one_line():
    engine = make_engine(database_url("mysql://root@127.0.0.1:1/iez_nowhere"))
    with pytest.raises(DatabaseUnavailable, match=r"interaction DB mysql://root@127.0.0.1:1/iez_nowhere is unavailable"):
        read(engine, lambda c: lookup(c, "/x"))

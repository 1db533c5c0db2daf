"""Galera (MariaDB cluster) specifics: whether the DB is a Galera node, and a causal read on one.

A Galera node may answer a read before it applied what another node committed;
the MDS lease's fence must see the latest record, so on Galera it reads with
``wsrep_sync_wait=1`` (wait for the cluster's writes first). Plain MariaDB and
SQLite need none of this.
"""

from __future__ import annotations

from sqlalchemy import Connection, Result, Select, text


def is_galera(conn: Connection) -> bool:
    """Whether the MariaDB server behind ``conn`` is a Galera node (``wsrep_on`` is ON)."""
    row = conn.execute(text("SHOW VARIABLES LIKE 'wsrep_on'")).first()
    return row is not None and str(row[1]).upper() == "ON"


def causal_read(conn: Connection, query: Select) -> Result:
    """``query`` (its parameters inlined) run after this node applied every write the cluster committed before."""
    compiled = query.compile(conn, compile_kwargs={"literal_binds": True})
    return conn.execute(text(f"SET STATEMENT wsrep_sync_wait=1 FOR {compiled}"))

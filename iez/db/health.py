"""The two statements ``/healthz`` sends: whether the interaction DB answers, and whether it takes a write.

Kept here so the API states what it checks and the DB layer how; the probe
write touches ``alembic_version`` only, a table nothing but ``iez db upgrade``
otherwise writes, so no writer ever waits on it.
"""

from __future__ import annotations

from sqlalchemy import Connection, text


def answers(conn: Connection) -> None:
    """One round trip (``SELECT 1``); raises what the driver raises when the DB does not answer."""
    conn.execute(text("SELECT 1")).scalar()


def write_probe(conn: Connection) -> None:
    """A real write: ``alembic_version``'s one row updated to itself (SQLite writes the page; MariaDB checks
    the UPDATE privilege and the server's read-only state). The caller begins and commits the transaction."""
    conn.execute(text("UPDATE alembic_version SET version_num = version_num"))

"""The database's clock: leases are judged by one clock, the server's, not each node's.

Two MDSs on nodes whose clocks drift would otherwise disagree on whether a
lease has expired; SQLite has no server, so its clock is this node's.
"""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import Connection, text

from iez.db.engine import is_sqlite
from iez.db.models import utcnow


def db_now(conn: Connection) -> datetime:
    """The database's clock, naive UTC (SQLite has none of its own: the node's)."""
    if is_sqlite(conn):
        return utcnow()
    return conn.execute(text("SELECT UTC_TIMESTAMP(6)")).scalar_one()

"""The interaction database (paper III-A3): where the client side and the MDS meet.

- :mod:`iez.db.models`: the tables (SQLAlchemy 2 typed models);
- :mod:`iez.db.engine`: engines, the single-writer rule, retried reads; opening never creates;
- :mod:`iez.db.schema`: Alembic upgrades (the one place a database is created) and the
  out-of-date check services run at start;
- :mod:`iez.db.stats`, :mod:`iez.db.requests`, :mod:`iez.db.allocations`: what the API and CLI do with them;
- :mod:`iez.db.lookup`, :mod:`iez.db.owners`, :mod:`iez.db.maps`: a path's live layout, for the library, the API
  and the layout maps;
- :mod:`iez.db.ingest`, :mod:`iez.db.clock`, :mod:`iez.db.galera`, :mod:`iez.db.health`: the MDS's batched
  writes, the lease's clock and causal read, ``/healthz``'s probes;
- :mod:`iez.db.stager_state`, :mod:`iez.db.darshan_state`: the local SQLite state of the stager and of the
  Darshan importer.
- :mod:`iez.db.inventory`: the file inventory's bulk writes, changelog positions, summaries and the plan
  and drain queries (:mod:`iez.inventory` batches and orders them).

Every SQL statement is written in this package (``tests/test_sql_in_db_layer.py``).

``open_db(settings)`` gives the engine a command or service uses after checking its schema.
"""

from __future__ import annotations

from sqlalchemy import Engine

from iez.config import Settings
from iez.db.engine import DatabaseMissing, DatabaseUnavailable, engine_for
from iez.db.schema import SchemaOutOfDate, check_schema, ensure_database, is_empty, upgrade


def open_db(settings: Settings, create_if_empty: bool = False) -> Engine:
    """The engine for ``settings.db``, refusing a missing database or an out-of-date schema.

    Without ``create_if_empty`` (every command that reads, serves or adds to an
    existing database) a missing SQLite file or directory, or a missing MariaDB
    database, raises :class:`DatabaseMissing` naming ``iez db upgrade``; nothing
    is created. With it (``iez alloc add`` only) a database that does not exist
    or holds no tables yet is created and brought to the current schema; one
    that holds an older iez schema is still refused, since upgrading a shared
    database is an administrator's decision.
    """
    engine = engine_for(settings.db_url)
    if create_if_empty:
        ensure_database(settings.db_url)
        if is_empty(engine):
            upgrade(engine)
    check_schema(engine)
    return engine


__all__ = ["DatabaseMissing", "DatabaseUnavailable", "SchemaOutOfDate", "open_db"]

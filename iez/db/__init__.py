"""The interaction database (paper III-A3): where the client side and the MDS meet.

- :mod:`iez.db.models`: the tables (SQLAlchemy 2 typed models);
- :mod:`iez.db.engine`: engines, the single-writer rule, retried reads;
- :mod:`iez.db.schema`: Alembic upgrades and the out-of-date check services run at start;
- :mod:`iez.db.stats`, :mod:`iez.db.requests`, :mod:`iez.db.allocations`: what the API and CLI do with them.

``open_db(settings)`` gives the engine a service uses after checking its schema.
"""

from __future__ import annotations

from pathlib import Path

from sqlalchemy import Engine

from iez.config import Settings
from iez.db.engine import DatabaseUnavailable, engine_for
from iez.db.schema import SchemaOutOfDate, check_schema, ensure_database, is_empty, upgrade


def open_db(settings: Settings, create_if_empty: bool = False) -> Engine:
    """The engine for ``settings.db``, refusing an out-of-date schema.

    With ``create_if_empty`` a database that holds no tables yet (a new SQLite
    file, a new MariaDB database) is brought to the current schema first; one
    that holds an older iez schema is still refused, since upgrading a shared
    database is an administrator's decision.
    """
    url = settings.db_url
    if url.get_backend_name() == "sqlite" and not create_if_empty and not Path(url.database).exists():
        raise SchemaOutOfDate(f"no interaction DB at {url.database}: run `iez db upgrade --db '{url.database}'`")
    engine = engine_for(url)
    if create_if_empty:
        ensure_database(settings.db_url)
    if create_if_empty and is_empty(engine):
        upgrade(engine)
    check_schema(engine)
    return engine


__all__ = ["DatabaseUnavailable", "SchemaOutOfDate", "open_db"]

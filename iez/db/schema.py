"""Schema versions: upgrade the interaction DB, and refuse to serve an out-of-date one.

The Alembic scripts ship inside the package (``iez/db/migrations``) and the
Alembic configuration is built here in code, so ``iez db upgrade`` works from
an installed wheel, from any working directory, without an ``alembic.ini``.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import Engine, create_engine, inspect, text
from sqlalchemy.engine import URL
from sqlalchemy.exc import OperationalError

from iez.config import describe
from iez.db.engine import DatabaseUnavailable, migration_transaction, unavailable
from iez.db.engine import upgrade_command as url_upgrade_command
from iez.errors import ConfigError, StorageUnavailable

MIGRATIONS = Path(__file__).with_name("migrations")


class SchemaOutOfDate(StorageUnavailable, RuntimeError):
    """The database's schema is not the one this iez needs; the message names the fixing command. Unavailable
    rather than misconfigured: a service started before ``iez db upgrade`` ends exits 75 and systemd retries it."""


def alembic_config() -> Config:
    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS))
    return config


def head_revision() -> str:
    head = ScriptDirectory.from_config(alembic_config()).get_current_head()
    assert head is not None, "iez ships at least one migration"
    return head


def current_revision(engine: Engine) -> str | None:
    try:
        with engine.connect() as conn:
            return MigrationContext.configure(conn).get_current_revision()
    except OperationalError as err:
        raise unavailable(engine, err) from err


def is_empty(engine: Engine) -> bool:
    """No tables at all: a database nobody has used yet."""
    try:
        with engine.connect() as conn:
            return not inspect(conn).get_table_names()
    except OperationalError as err:
        raise unavailable(engine, err) from err


def upgrade_command(engine: Engine) -> str:
    return url_upgrade_command(engine.url)


def check_schema(engine: Engine) -> str:
    """The current revision, or :class:`SchemaOutOfDate` naming the command that fixes it."""
    current, head = current_revision(engine), head_revision()
    if current == head:
        return current
    state = "has no iez schema" if current is None else f"is at schema revision {current}"
    raise SchemaOutOfDate(
        f"interaction DB {describe(engine.url)} {state}; this iez needs {head}: run `{upgrade_command(engine)}`"
    )


def upgrade(engine: Engine, revision: str = "head") -> str:
    """Bring the database to ``revision``; returns the revision it is at afterwards."""
    ensure_database(engine.url)
    config = alembic_config()
    try:
        with migration_transaction(engine) as conn:  # no read time-out: an ALTER TABLE may take minutes
            config.attributes["connection"] = conn
            command.upgrade(config, revision)
    except OperationalError as err:
        raise unavailable(engine, err) from err
    return current_revision(engine) or "base"


def downgrade(engine: Engine, revision: str) -> str:
    config = alembic_config()
    with migration_transaction(engine) as conn:
        config.attributes["connection"] = conn
        command.downgrade(config, revision)
    return current_revision(engine) or "base"


def ensure_database(url: URL) -> None:
    """Create the database if it does not exist yet: the one place iez creates a database.

    SQLite: the file (empty) and its directory; MariaDB: the database
    (``CREATE DATABASE IF NOT EXISTS``). Engines never create (see
    :mod:`iez.db.engine`); :func:`upgrade` calls this first, and so do
    ``iez db upgrade`` and ``iez alloc add``, the only commands that create.
    """
    if not url.database:  # iez.config.database_url refuses such a URL (an in-memory DB, a server without one)
        raise ConfigError(f"interaction DB {describe(url)} names no database")
    if url.get_backend_name() == "sqlite":
        path = Path(url.database)
        if not path.exists():
            path.parent.mkdir(parents=True, exist_ok=True)
            sqlite3.connect(path).close()  # mode rwc: creates the empty file
        return
    server = create_engine(url.set(database=""), connect_args={"connect_timeout": 5})
    name = url.database.replace("`", "``")
    try:
        with server.begin() as conn:
            conn.execute(text(f"CREATE DATABASE IF NOT EXISTS `{name}` CHARACTER SET utf8mb4"))
    except OperationalError as err:
        raise DatabaseUnavailable(f"interaction DB {describe(url)} is unavailable: {err.orig}") from err
    finally:
        server.dispose()

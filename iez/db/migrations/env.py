"""Alembic environment: runs on the connection or URL that :mod:`iez.db.schema` hands in."""

from __future__ import annotations

from alembic import context

from iez.db.engine import make_engine
from iez.db.models import Base

config = context.config


def run_migrations_online() -> None:
    connection = config.attributes.get("connection")
    if connection is not None:
        _run(connection)
        return
    from iez.config import Settings, database_url

    settings = Settings.from_env()  # IEZ_DB when it is set; the state directory's default is not assumed here
    url = (config.attributes.get("url") or config.get_main_option("sqlalchemy.url")
           or (settings.db if "db" in settings.model_fields_set else None))
    if not url:
        raise SystemExit("no database: set IEZ_DB or use `iez db upgrade --db DB`")

    engine = make_engine(database_url(str(url)) if isinstance(url, str) else url)
    try:
        with engine.begin() as conn:
            _run(conn)
    finally:
        engine.dispose()


def _run(connection) -> None:
    context.configure(
        connection=connection,
        target_metadata=Base.metadata,
        render_as_batch=connection.dialect.name == "sqlite",  # SQLite alters tables by copying them
        compare_type=True,
    )
    with context.begin_transaction():
        context.run_migrations()


if context.is_offline_mode():
    raise SystemExit("iez migrations run online only: `iez db upgrade --db DB`")
run_migrations_online()

"""Schema: migrations build what the models say, services refuse an out-of-date schema, C-friendly lookups."""

from __future__ import annotations

import pytest
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from sqlalchemy import inspect, text

from iez.config import Settings, database_url
from iez.db import DatabaseMissing, SchemaOutOfDate, open_db
from iez.db.allocations import pin
from iez.db.engine import make_engine
from iez.db.models import Base
from iez.db.schema import check_schema, current_revision, downgrade, ensure_database, head_revision, upgrade

TABLES = {"applications", "runs", "write_requests", "allocations", "reservations", "oss", "osts",
          "oss_stats", "ost_stats", "iez_lock", "mds_lease", "alembic_version"}


@pytest.mark.slow
def test_upgrade_creates_every_table_and_downgrade_removes_them(empty_db):
    engine = make_engine(database_url(empty_db))
    assert upgrade(engine) == head_revision()
    with engine.connect() as conn:
        assert TABLES <= set(inspect(conn).get_table_names())
        assert "placements" in inspect(conn).get_view_names()
    assert downgrade(engine, "base") == "base"
    with engine.connect() as conn:
        assert set(inspect(conn).get_table_names()) <= {"alembic_version"}
        assert inspect(conn).get_view_names() == []
    assert upgrade(engine) == head_revision()
    engine.dispose()


@pytest.mark.slow
def test_models_and_migrations_describe_the_same_schema(db):
    engine = make_engine(database_url(db))
    with engine.connect() as conn:
        assert compare_metadata(MigrationContext.configure(conn), Base.metadata) == []
    engine.dispose()


@pytest.mark.slow
def test_service_refuses_a_database_without_schema_and_names_the_fix(empty_db):
    settings = Settings.from_env(db=empty_db, env={})
    if empty_db.endswith(".db"):
        with pytest.raises(DatabaseMissing, match=r"iez db upgrade --db"):
            open_db(settings)  # a missing SQLite file, which opening does not create
        ensure_database(database_url(empty_db))  # now an empty file
    with pytest.raises(SchemaOutOfDate, match=r"has no iez schema.*run `iez db upgrade --db"):
        open_db(settings)


@pytest.mark.slow
def test_service_refuses_an_older_schema(db):
    engine = make_engine(database_url(db))
    with engine.begin() as conn:
        conn.execute(text("UPDATE alembic_version SET version_num = '0000'"))
    with pytest.raises(SchemaOutOfDate, match=r"revision 0000.*iez db upgrade"):
        check_schema(engine)
    with engine.begin() as conn:
        conn.execute(text("UPDATE alembic_version SET version_num = :v"), {"v": head_revision()})
    assert current_revision(engine) == head_revision()
    engine.dispose()


def test_placement_library_reads_a_layout_with_one_select_on_an_indexed_path(db):
    engine = make_engine(database_url(db))
    pin(engine, "/lustre/job/out.0", 1048576, [3, 7, 11])
    with engine.connect() as conn:
        row = conn.execute(
            text("SELECT stripe_size, stripe_count, osts FROM placements WHERE path = :p"), {"p": "/lustre/job/out.0"}
        ).one()
        assert tuple(row) == (1048576, 3, "3 7 11")  # plain text OST list, as the paper's Table II
        if engine.dialect.name == "sqlite":
            plan = " ".join(str(r) for r in conn.execute(
                text("EXPLAIN QUERY PLAN SELECT osts FROM placements WHERE path = '/x'")))
            assert "ix_allocations_path" in plan
        else:
            plan = conn.execute(text("EXPLAIN SELECT osts FROM placements WHERE path = '/x'")).mappings().one()
            assert plan["key"] == "ix_allocations_path"
    engine.dispose()


def test_paths_are_case_sensitive(db):
    engine = make_engine(database_url(db))
    pin(engine, "/lustre/Out", 65536, [1])
    pin(engine, "/lustre/out", 65536, [2])
    with engine.connect() as conn:
        rows = conn.execute(text("SELECT path, osts FROM placements ORDER BY osts")).all()
    assert [tuple(r) for r in rows] == [("/lustre/Out", "1"), ("/lustre/out", "2")]
    engine.dispose()


def test_sqlite_database_runs_in_wal_mode(tmp_path):
    db = str(tmp_path / "wal.db")
    engine = make_engine(database_url(db))
    upgrade(engine)
    with engine.connect() as conn:
        assert conn.execute(text("PRAGMA journal_mode")).scalar() == "wal"
    engine.dispose()

"""Fixtures of the inventory's tests: a real database (SQLite and MariaDB) emptied of inventory rows, an
emulated cluster."""

from __future__ import annotations

from pathlib import Path

import pytest
from sqlalchemy import create_engine, text

from iez.config import database_url

INV_TABLES = ("inv_objects", "inv_files", "inv_dirs", "inv_roots", "inv_changelog")


@pytest.fixture
def inv_db(db: str) -> str:
    """IEZ_DB at the current schema with no rows, inventory tables included."""
    engine = create_engine(database_url(db))
    with engine.begin() as conn:
        for table in INV_TABLES:
            conn.execute(text(f"DELETE FROM {table}"))
    engine.dispose()
    return db


@pytest.fixture
def engine(inv_db: str):
    from iez.config import Settings
    from iez.db import open_db

    eng = open_db(Settings.from_env(db=inv_db, env={}))
    yield eng
    eng.dispose()


@pytest.fixture
def cluster(tmp_path: Path) -> Path:
    """An emulated cluster (2 OSS x 2 OSTs of 64 MiB, no agents) under tmp/root, data in tmp/root/data."""
    from iez.emulate.cluster import create, layout_from_counts

    root = tmp_path / "root"
    create(layout_from_counts(root, [str(root / "data")], 2, 2, 64 << 20))
    return root

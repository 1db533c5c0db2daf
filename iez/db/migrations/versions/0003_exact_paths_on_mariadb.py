"""Exact path comparison on MariaDB: ``utf8mb4_nopad_bin`` for the path columns.

``utf8mb4_bin`` is a PAD SPACE collation: MariaDB compares "out.h5 " equal to
"out.h5", so a file whose name ends in a space would get another file's
layout. NO PAD compares every byte. SQLite compares exactly already.

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-22 15:20:00
"""

from __future__ import annotations

from alembic import op

revision = '0003'
down_revision = '0002'
branch_labels = None
depends_on = None

COLUMNS = (("allocations", "path"), ("write_requests", "path"))


def _collate(collation: str) -> None:
    if op.get_bind().dialect.name not in ("mysql", "mariadb"):
        return
    for table, column in COLUMNS:
        op.execute(f"ALTER TABLE {table} MODIFY {column} VARCHAR(4096) CHARACTER SET utf8mb4 "
                   f"COLLATE {collation} NOT NULL")


def upgrade() -> None:
    _collate("utf8mb4_nopad_bin")


def downgrade() -> None:
    _collate("utf8mb4_bin")

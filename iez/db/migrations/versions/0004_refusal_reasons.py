"""Per-file refusal: a write request the allocator could not place keeps the reason.

Refusal is per file (ARCHITECTURE.md): the other requests of the batch are
placed, and the refused one stays pending with ``refusal`` saying why, until a
later pass places it (which clears the reason).

Revision ID: 0004
Revises: 0003
Create Date: 2026-11-23 03:10:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = '0004'
down_revision = '0003'
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("write_requests") as batch:
        batch.add_column(sa.Column("refusal", sa.String(512), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("write_requests") as batch:
        batch.drop_column("refusal")

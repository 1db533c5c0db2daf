"""Skips per run: creates the placement library left to Lustre because the directory's default had changed.

The library applies an allocation only while the file's directory still has
the default layout iez learnt the request under; otherwise (a user's ``lfs
setstripe``, an administrator's new default) it makes the plain call and counts
a *skip*. ``runs.files_skipped`` keeps their sum per run. Skips are neither hits
nor misses: a run that skipped files was still predicted right, so they do not
count toward the re-trace miss rate.

Revision ID: 0006
Revises: 0005
Create Date: 2026-11-24 10:00:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = '0006'
down_revision = '0005'
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("runs") as batch:
        batch.add_column(sa.Column("files_skipped", sa.Integer(), nullable=False, server_default="0"))


def downgrade() -> None:
    with op.batch_alter_table("runs") as batch:
        batch.drop_column("files_skipped")

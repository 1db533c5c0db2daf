"""Mirrors per file (issue 17): ``write_requests.mirror_count``.

How many copies of the file iez places (Lustre FLR mirrors), each in failure
domains no other copy uses: 1 (no mirror) for every row that exists, 1 to 4
for new ones (``iez.model.MAX_MIRRORS``). A request whose mirror count changes
loses its allocation, as for any other change of its policy.

Revision ID: 0008
Revises: 0007
Create Date: 2026-11-26 10:00:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = '0008'
down_revision = '0007'
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("write_requests") as batch:
        batch.add_column(sa.Column("mirror_count", sa.Integer(), nullable=False, server_default="1"))
        batch.create_check_constraint("ck_write_requests_mirror_count", "mirror_count BETWEEN 1 AND 4")


def downgrade() -> None:
    with op.batch_alter_table("write_requests") as batch:
        batch.drop_constraint("ck_write_requests_mirror_count", type_="check")
        batch.drop_column("mirror_count")

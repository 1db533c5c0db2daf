"""MDS live view: each OSS's report interval, and the free space each reservation was made against.

``oss.interval_s`` lets the MDS call an OSS stale after three of *its* missed
intervals (agents may report every second or every minute).
``reservations.avail_kb_at`` is the OST's ``kbytes_avail`` when the reservation
was made: once reports show that much space used since, the bytes have been
written and the reservation ends before its time-out.

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-22 15:05:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = '0002'
down_revision = '0001'
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table('oss', schema=None) as batch_op:
        batch_op.add_column(sa.Column('interval_s', sa.Float(), nullable=True))
    with op.batch_alter_table('reservations', schema=None) as batch_op:
        batch_op.add_column(sa.Column('avail_kb_at', sa.BigInteger(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table('reservations', schema=None) as batch_op:
        batch_op.drop_column('avail_kb_at')
    with op.batch_alter_table('oss', schema=None) as batch_op:
        batch_op.drop_column('interval_s')

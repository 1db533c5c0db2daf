"""The active MDS service of the database (issue 27, item 6): ``mds_lease``.

One row per service ('mds'): which MDS process holds it (``owner`` token, ``pid``, ``host``,
``endpoint``, ``since``), its last heartbeat (``renewed``) and when the record goes stale
(``expires``, three report intervals later), on the database's clock. A second ``iez mds`` on the
same database reads it at start, names the holder and exits 2, or with ``--standby`` waits for the
record to be released or to go stale and takes it over (:mod:`iez.mds.lease`). ``generation`` counts
claims (a fencing token for the lease of issue 25), ``version`` every change (claims compare and swap on it).

Revision ID: 0010
Revises: 0009
Create Date: 2026-11-26 14:00:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import mysql

NAME = sa.String(length=255).with_variant(mysql.VARCHAR(charset='utf8mb4', collation='utf8mb4_bin', length=255), 'mariadb', 'mysql')
TIMESTAMP = sa.DateTime().with_variant(mysql.DATETIME(fsp=6), 'mariadb', 'mysql')

revision = '0010'
down_revision = '0009'
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table('mds_lease',
    sa.Column('service', sa.String(length=64), nullable=False),
    sa.Column('owner', sa.String(length=64), nullable=True),
    sa.Column('generation', sa.BigInteger(), nullable=False),
    sa.Column('version', sa.BigInteger(), nullable=False),
    sa.Column('pid', sa.Integer(), nullable=False),
    sa.Column('host', NAME, nullable=False),
    sa.Column('instance', sa.String(length=255), nullable=False),
    sa.Column('endpoint', sa.String(length=255), nullable=True),
    sa.Column('since', TIMESTAMP, nullable=False),
    sa.Column('renewed', TIMESTAMP, nullable=False),
    sa.Column('expires', TIMESTAMP, nullable=False),
    sa.PrimaryKeyConstraint('service'),
    mysql_charset='utf8mb4',
    )


def downgrade() -> None:
    op.drop_table('mds_lease')

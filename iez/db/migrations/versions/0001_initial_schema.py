"""Initial schema: applications, runs, write requests, allocations, reservations, OSS/OST statistics.

Revision ID: 0001
Revises: 
Create Date: 2026-11-22 12:13:41.263741
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import mysql

# Case-sensitive names and paths on MariaDB (its default collation folds case).
NAME = sa.String(length=255).with_variant(mysql.VARCHAR(charset='utf8mb4', collation='utf8mb4_bin', length=255), 'mariadb', 'mysql')
PATH = sa.String(length=4096).with_variant(mysql.VARCHAR(charset='utf8mb4', collation='utf8mb4_bin', length=4096), 'mariadb', 'mysql')
TIMESTAMP = sa.DateTime().with_variant(mysql.DATETIME(fsp=6), 'mariadb', 'mysql')

revision = '0001'
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table('applications',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('name', NAME, nullable=False),
    sa.Column('fingerprint', sa.String(length=64), nullable=True),
    sa.Column('created', TIMESTAMP, nullable=False),
    sa.PrimaryKeyConstraint('id'),
    sa.UniqueConstraint('name'),
    mysql_charset='utf8mb4',
    )
    op.create_table('iez_lock',
    sa.Column('id', sa.Integer(), autoincrement=False, nullable=False),
    sa.PrimaryKeyConstraint('id'),
    mysql_charset='utf8mb4',
    )
    op.bulk_insert(sa.table('iez_lock', sa.column('id', sa.Integer())), [{'id': 1}])
    op.create_table('oss',
    sa.Column('oss_id', NAME, nullable=False),
    sa.Column('seq', sa.BigInteger(), nullable=False),
    sa.Column('sample_time', TIMESTAMP, nullable=False),
    sa.Column('received', TIMESTAMP, nullable=False),
    sa.Column('cpu_pct', sa.Float(), nullable=False),
    sa.Column('mem_pct', sa.Float(), nullable=False),
    sa.PrimaryKeyConstraint('oss_id'),
    mysql_charset='utf8mb4',
    )
    op.create_table('oss_stats',
    sa.Column('id', sa.BigInteger().with_variant(sa.Integer(), 'sqlite'), nullable=False),
    sa.Column('oss_id', NAME, nullable=False),
    sa.Column('seq', sa.BigInteger(), nullable=False),
    sa.Column('sample_time', TIMESTAMP, nullable=False),
    sa.Column('cpu_pct', sa.Float(), nullable=False),
    sa.Column('mem_pct', sa.Float(), nullable=False),
    sa.PrimaryKeyConstraint('id'),
    mysql_charset='utf8mb4',
    )
    with op.batch_alter_table('oss_stats', schema=None) as batch_op:
        batch_op.create_index('ix_oss_stats_oss_time', ['oss_id', 'sample_time'], unique=False)

    op.create_table('ost_stats',
    sa.Column('id', sa.BigInteger().with_variant(sa.Integer(), 'sqlite'), nullable=False),
    sa.Column('ost_index', sa.Integer(), nullable=False),
    sa.Column('oss_id', NAME, nullable=False),
    sa.Column('kbytes_total', sa.BigInteger(), nullable=False),
    sa.Column('kbytes_avail', sa.BigInteger(), nullable=False),
    sa.Column('read_bytes', sa.BigInteger(), nullable=True),
    sa.Column('write_bytes', sa.BigInteger(), nullable=True),
    sa.Column('sample_time', TIMESTAMP, nullable=False),
    sa.PrimaryKeyConstraint('id'),
    mysql_charset='utf8mb4',
    )
    with op.batch_alter_table('ost_stats', schema=None) as batch_op:
        batch_op.create_index('ix_ost_stats_ost_time', ['ost_index', 'sample_time'], unique=False)

    op.create_table('osts',
    sa.Column('ost_index', sa.Integer(), autoincrement=False, nullable=False),
    sa.Column('name', NAME, nullable=False),
    sa.Column('oss_id', NAME, nullable=False),
    sa.Column('kbytes_total', sa.BigInteger(), nullable=False),
    sa.Column('kbytes_avail', sa.BigInteger(), nullable=False),
    sa.Column('read_bytes', sa.BigInteger(), nullable=True),
    sa.Column('write_bytes', sa.BigInteger(), nullable=True),
    sa.Column('sample_time', TIMESTAMP, nullable=False),
    sa.PrimaryKeyConstraint('ost_index'),
    mysql_charset='utf8mb4',
    )
    with op.batch_alter_table('osts', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_osts_oss_id'), ['oss_id'], unique=False)

    op.create_table('runs',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('app_id', sa.Integer(), nullable=False),
    sa.Column('started', TIMESTAMP, nullable=False),
    sa.Column('ended', TIMESTAMP, nullable=True),
    sa.Column('files_found', sa.Integer(), nullable=False),
    sa.Column('files_missed', sa.Integer(), nullable=False),
    sa.ForeignKeyConstraint(['app_id'], ['applications.id'], ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('id'),
    mysql_charset='utf8mb4',
    )
    with op.batch_alter_table('runs', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_runs_app_id'), ['app_id'], unique=False)

    op.create_table('write_requests',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('app_id', sa.Integer(), nullable=False),
    sa.Column('path', PATH, nullable=False),
    sa.Column('path_hash', sa.String(length=64), nullable=False),
    sa.Column('write_bytes', sa.BigInteger(), nullable=False),
    sa.Column('stripe_count', sa.Integer(), nullable=False),
    sa.Column('stripe_size', sa.BigInteger(), nullable=True),
    sa.Column('rank', sa.Integer(), nullable=False),
    sa.Column('source', sa.String(length=16), nullable=False),
    sa.Column('created', TIMESTAMP, nullable=False),
    sa.Column('updated', TIMESTAMP, nullable=False),
    sa.CheckConstraint('stripe_count = -1 OR stripe_count BETWEEN 1 AND 2000', name='ck_write_requests_stripe_count'),
    sa.CheckConstraint('write_bytes >= 0', name='ck_write_requests_write_bytes'),
    sa.ForeignKeyConstraint(['app_id'], ['applications.id'], ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('id'),
    sa.UniqueConstraint('app_id', 'path_hash', name='uq_write_requests_app_path'),
    mysql_charset='utf8mb4',
    )
    op.create_table('allocations',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('request_id', sa.Integer(), nullable=True),
    sa.Column('path', PATH, nullable=False),
    sa.Column('stripe_size', sa.BigInteger(), nullable=False),
    sa.Column('stripe_count', sa.Integer(), nullable=False),
    sa.Column('osts', sa.Text(), nullable=False),
    sa.Column('policy', sa.String(length=32), nullable=False),
    sa.Column('state', sa.String(length=16), nullable=False),
    sa.Column('created', TIMESTAMP, nullable=False),
    sa.CheckConstraint('stripe_count >= 1', name='ck_allocations_stripe_count'),
    sa.CheckConstraint('stripe_size > 0', name='ck_allocations_stripe_size'),
    sa.ForeignKeyConstraint(['request_id'], ['write_requests.id'], ondelete='SET NULL'),
    sa.PrimaryKeyConstraint('id'),
    mysql_charset='utf8mb4',
    )
    with op.batch_alter_table('allocations', schema=None) as batch_op:
        batch_op.create_index('ix_allocations_path', ['path'], unique=False, mysql_length=255)
        batch_op.create_index('ix_allocations_request', ['request_id'], unique=False)

    op.create_table('reservations',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('allocation_id', sa.Integer(), nullable=False),
    sa.Column('ost_index', sa.Integer(), nullable=False),
    sa.Column('bytes', sa.BigInteger(), nullable=False),
    sa.Column('expires', TIMESTAMP, nullable=False),
    sa.ForeignKeyConstraint(['allocation_id'], ['allocations.id'], ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('id'),
    mysql_charset='utf8mb4',
    )
    with op.batch_alter_table('reservations', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_reservations_allocation_id'), ['allocation_id'], unique=False)
        batch_op.create_index('ix_reservations_ost_expires', ['ost_index', 'expires'], unique=False)
    # What the placement library (C) queries: one row per file that has a live layout.
    op.execute(
        "CREATE VIEW placements AS "
        "SELECT path, stripe_size, stripe_count, osts, policy, created FROM allocations WHERE state <> 'stale'"
    )


def downgrade() -> None:
    # Dropping a table drops its indexes (MariaDB refuses to drop an index a foreign key needs first).
    op.execute("DROP VIEW placements")
    for table in ("reservations", "allocations", "write_requests", "runs", "osts", "ost_stats",
                  "oss_stats", "oss", "iez_lock", "applications"):
        op.drop_table(table)

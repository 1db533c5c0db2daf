"""The file inventory (issue 24, item 4): ``inv_roots``, ``inv_dirs``, ``inv_files``, ``inv_objects``,
``inv_changelog`` (:mod:`iez.inventory.tables` says what each holds).

Files by FID with their parent's FID and name; stripe objects indexed by ``(ost, bytes)`` so per-OST totals
and the largest objects on an OST are index-backed queries; one changelog position per MDT and user.

Revision ID: 0011
Revises: 0010
Create Date: 2026-11-26 15:00:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import mysql

NAME = sa.String(length=255).with_variant(mysql.VARCHAR(charset='utf8mb4', collation='utf8mb4_bin', length=255), 'mariadb', 'mysql')
PATH = sa.String(length=4096).with_variant(mysql.VARCHAR(charset='utf8mb4', collation='utf8mb4_nopad_bin', length=4096), 'mariadb', 'mysql')
TIMESTAMP = sa.DateTime().with_variant(mysql.DATETIME(fsp=6), 'mariadb', 'mysql')
FID = sa.String(length=48)

revision = '0011'
down_revision = '0010'
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table('inv_roots',
    sa.Column('id', sa.Integer(), autoincrement=True, nullable=False),
    sa.Column('path_hash', sa.String(length=64), nullable=False),
    sa.Column('path', PATH, nullable=False),
    sa.Column('fid', FID, nullable=False),
    sa.Column('generation', sa.BigInteger(), nullable=False),
    sa.Column('scanned', TIMESTAMP, nullable=True),
    sa.Column('scan_s', sa.Float(), nullable=True),
    sa.PrimaryKeyConstraint('id'),
    sa.UniqueConstraint('path_hash'),
    mysql_charset='utf8mb4',
    )
    op.create_table('inv_dirs',
    sa.Column('fid', FID, nullable=False),
    sa.Column('parent', FID, nullable=True),
    sa.Column('name', PATH, nullable=False),
    sa.Column('root_id', sa.Integer(), nullable=False),
    sa.Column('gen', sa.BigInteger(), nullable=False),
    sa.PrimaryKeyConstraint('fid'),
    mysql_charset='utf8mb4',
    )
    op.create_index('ix_inv_dirs_parent', 'inv_dirs', ['parent'], unique=False)
    op.create_table('inv_files',
    sa.Column('fid', FID, nullable=False),
    sa.Column('parent', FID, nullable=False),
    sa.Column('name', NAME, nullable=False),
    sa.Column('root_id', sa.Integer(), nullable=False),
    sa.Column('size', sa.BigInteger(), nullable=False),
    sa.Column('layout', sa.Text(), nullable=True),
    sa.Column('uid', sa.BigInteger(), nullable=False),
    sa.Column('gid', sa.BigInteger(), nullable=False),
    sa.Column('mode', sa.Integer(), nullable=False),
    sa.Column('nlink', sa.Integer(), nullable=False),
    sa.Column('ino', sa.BigInteger(), nullable=False),
    sa.Column('mtime_ns', sa.BigInteger(), nullable=False),
    sa.Column('ctime_ns', sa.BigInteger(), nullable=False),
    sa.Column('atime_ns', sa.BigInteger(), nullable=False),
    sa.Column('stale', sa.Integer(), nullable=False),
    sa.Column('gen', sa.BigInteger(), nullable=False),
    sa.PrimaryKeyConstraint('fid'),
    mysql_charset='utf8mb4',
    )
    op.create_index('ix_inv_files_parent', 'inv_files', ['parent'], unique=False)
    op.create_index('ix_inv_files_root', 'inv_files', ['root_id'], unique=False)
    op.create_index('ix_inv_files_stale', 'inv_files', ['stale'], unique=False)
    op.create_table('inv_objects',
    sa.Column('fid', FID, nullable=False),
    sa.Column('seq', sa.Integer(), autoincrement=False, nullable=False),
    sa.Column('ost', sa.Integer(), nullable=False),
    sa.Column('bytes', sa.BigInteger(), nullable=False),
    sa.PrimaryKeyConstraint('fid', 'seq'),
    mysql_charset='utf8mb4',
    )
    op.create_index('ix_inv_objects_ost_bytes', 'inv_objects', ['ost', 'bytes'], unique=False)
    op.create_table('inv_changelog',
    sa.Column('mdt', sa.String(length=64), nullable=False),
    sa.Column('user', sa.String(length=64), nullable=False),
    sa.Column('position', sa.BigInteger(), nullable=False),
    sa.Column('updated', TIMESTAMP, nullable=True),
    sa.Column('roots', sa.Text(), nullable=True),
    sa.Column('records', sa.BigInteger(), nullable=False),
    sa.Column('rescans', sa.Integer(), nullable=False),
    sa.Column('note', sa.Text(), nullable=True),
    sa.PrimaryKeyConstraint('mdt', 'user'),
    mysql_charset='utf8mb4',
    )


def downgrade() -> None:
    op.drop_table('inv_changelog')
    op.drop_index('ix_inv_objects_ost_bytes', table_name='inv_objects')
    op.drop_table('inv_objects')
    op.drop_index('ix_inv_files_stale', table_name='inv_files')
    op.drop_index('ix_inv_files_root', table_name='inv_files')
    op.drop_index('ix_inv_files_parent', table_name='inv_files')
    op.drop_table('inv_files')
    op.drop_index('ix_inv_dirs_parent', table_name='inv_dirs')
    op.drop_table('inv_dirs')
    op.drop_table('inv_roots')

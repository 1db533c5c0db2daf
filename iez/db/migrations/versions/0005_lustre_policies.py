"""Lustre's own policies: OST states, pools and reserved space; pools and PFL templates on requests and layouts.

- ``osts``: ``state`` (one of :data:`iez.model.OST_STATES`, from the agent's
  v2 messages and the MDS's ``osp.*`` parameters), ``pools`` (space-separated
  pool names from ``lod.*.pools.*``), ``reserved_kbytes`` (Lustre's
  ``osp.*.reserved_mb_low``: space Lustre keeps back and iez never uses).
- ``write_requests``: ``pool`` and ``components`` (the PFL template as JSON, the
  contract's list of ``{"end", "stripe_count", "stripe_size", "pool"}``), and
  ``default_layout``: the canonical template text of the directory's default
  layout when the request was learnt (``''`` none, NULL unknown).
- ``allocations``: ``pool``, ``layout`` (the layout text of
  placement_lib/README.md, version 2, for layouts with a pool or components;
  NULL for a plain layout) and ``default_layout`` copied from the request: the
  library compares it with the directory's current default before it applies;
  ``note`` says what the policy had to give up (a degraded OST used because
  nothing else fitted).
- The ``placements`` view the library queries gains ``layout`` and ``default_layout``.

Revision ID: 0005
Revises: 0004
Create Date: 2026-11-23 09:00:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = '0005'
down_revision = '0004'
branch_labels = None
depends_on = None

_VIEW_V1 = ("CREATE VIEW placements AS "
            "SELECT path, stripe_size, stripe_count, osts, policy, created FROM allocations WHERE state <> 'stale'")
_VIEW_V2 = ("CREATE VIEW placements AS "
            "SELECT path, stripe_size, stripe_count, osts, policy, created, layout, default_layout "
            "FROM allocations WHERE state <> 'stale'")


def upgrade() -> None:
    op.execute("DROP VIEW placements")
    with op.batch_alter_table("osts") as batch:
        batch.add_column(sa.Column("state", sa.String(16), nullable=False, server_default="active"))
        batch.add_column(sa.Column("pools", sa.Text(), nullable=True))
        batch.add_column(sa.Column("reserved_kbytes", sa.BigInteger(), nullable=True))
    with op.batch_alter_table("write_requests") as batch:
        batch.add_column(sa.Column("pool", sa.String(32), nullable=True))
        batch.add_column(sa.Column("components", sa.Text(), nullable=True))
        batch.add_column(sa.Column("default_layout", sa.Text(), nullable=True))
    with op.batch_alter_table("allocations") as batch:
        batch.add_column(sa.Column("pool", sa.String(32), nullable=True))
        batch.add_column(sa.Column("layout", sa.Text(), nullable=True))
        batch.add_column(sa.Column("default_layout", sa.Text(), nullable=True))
        batch.add_column(sa.Column("note", sa.String(512), nullable=True))
    op.execute(_VIEW_V2)


def downgrade() -> None:
    op.execute("DROP VIEW placements")
    with op.batch_alter_table("allocations") as batch:
        for column in ("note", "default_layout", "layout", "pool"):
            batch.drop_column(column)
    with op.batch_alter_table("write_requests") as batch:
        for column in ("default_layout", "components", "pool"):
            batch.drop_column(column)
    with op.batch_alter_table("osts") as batch:
        for column in ("reserved_kbytes", "pools", "state"):
            batch.drop_column(column)
    op.execute(_VIEW_V1)
